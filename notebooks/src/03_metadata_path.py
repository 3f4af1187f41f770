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
# **Predict, then run.** Count the request's steps from 0, its prefill (engine step numbers keep counting across requests, so they are not used here). At its step 16 the request holds its prompt (printed below) plus the 16 tokens it has written; the hook hides every block it does not keep, each a full 32 tokens. What `seq_len` does the kernel's metadata say for it at that step? Type yours, run the cell: it moves the player there.

# %%
PREDICT = None          # a number
from da_lab.predict import check, guessed, step_to

first = next(a for rec in source.records for a in rec.added)
print(f"{first['req']}'s prompt: {first['prompt_len']} tokens (blocks of 32)")
if guessed(PREDICT, "the seq_len the kernel got at the request's step 16"):
    k, r = step_to(player, 16)          # run again: the same step, no further
    rec = source.records[player.i]
    m = rec.metadata
    print(f"{r.req}'s step {k} (engine step {rec.step}): it holds {r.seq_len} tokens; the "
          f"kernel reads {r.blocks_read} of its {r.blocks_total} blocks")
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
