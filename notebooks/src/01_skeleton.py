# %% [markdown]
# # 1 · The model as a skeleton
#
# vLLM builds the model from a skeleton whose slots it fills at load time: the attention backend, each linear layer's LinearMethod, the implementation each CustomOp dispatches to, fused residual + RMSNorm. Every label below was read from the loaded model, not written by hand.

# %%
# LIVE = True: the skeleton below is the one a real vLLM engine in this kernel filled
# (Run All again reuses it); False: replay TRACE, a recorded run, no vLLM needed
# (00_tour lists the H200 recordings).
LIVE = True
TRACE = "../traces/seed_cpu.jsonl.gz"
from da_lab.lesson import open_lesson

lab, source, highlight = open_lesson(LIVE, TRACE)

# %%
from da_lab_widgets import Player
from da_lab_widgets.skeleton import SkeletonDiagram

skeleton = SkeletonDiagram(source.header, highlight)
player = Player(source, [skeleton])
player.widget

# %% [markdown]
# The buttons ask real engines: a sliding-window variant and a quantized variant of the same tiny model are started in a separate process (stock vLLM) and introspected the same way: a variant's first answer waits for its engine to start; answers are cached.

# %% [markdown]
# **Predict, then run.** Every layer of this model is full (global) attention. How many different attention backends did vLLM put in its attention slots? Type a number, run the cell: it counts them in what the engine reported.

# %%
PREDICT = None          # a number
from da_lab.predict import check, guessed

if guessed(PREDICT, "the number of attention backends"):
    attn = [s for s in source.header["skeleton"]["slots"] if s["slot"] == "attention"]
    backends = sorted({s["backend"] for s in attn})
    check(PREDICT, len(backends), "the number of attention backends",
          f"{len(attn)} attention slots, all {', '.join(backends)}")
    print("impl classes:", sorted({s["impl"] for s in attn}))

# %% [markdown]
# ## What you can now explain
# - Which parts of a model are fixed code and which are slots vLLM fills per platform.
# - Why an all-global model has one attention backend everywhere.
# - What changes in the skeleton for a sliding-window or a quantized model.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
