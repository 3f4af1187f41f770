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
# ## What you can now explain
# - The difference between a logical block and a physical block.
# - Why the staged row and the committed row are the same on the CPU and two copies on a GPU.
# - How prefix caching lets two requests own the same physical block.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
