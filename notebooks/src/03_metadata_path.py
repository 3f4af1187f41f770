# %% [markdown]
# # 3 · The metadata path
#
# SchedulerOutput → BlockTable (append_row, commit) → MetadataBuilder → set_forward_context → Attention → the attention impl. DA's hook is the only edit, and it sits at the builder's `build` call.

# %%
# LIVE = True: the metadata below is what a real vLLM engine in this kernel built
# (Run All again reuses it); False: replay TRACE, a recorded run, no vLLM needed
# (00_tour lists the H200 recordings).
LIVE = True
TRACE = "../traces/seed_cpu.jsonl.gz"
from da_lab.lesson import open_lesson

lab, source, highlight = open_lesson(LIVE, TRACE)

# %%
from da_lab_widgets import Player
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
# - Why KV writes (slot mapping) must see the committed row while reads see the kernel row.
# - Why the hook acts at the builder and not between `append_row()` and `commit()`.
# - Which values the kernel really receives at each step.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
