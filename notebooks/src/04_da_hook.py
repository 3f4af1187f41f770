# %% [markdown]
# # 4 · The DA hook, animated
#
# The response streams in; the tag buffer fills and traps at `>`; the GLOBAL / FOCUS / LOCAL lamps follow; the row shows which blocks the kernel reads. The model (`da-tiny-tags`) writes its own `<focus Ck>`, then the answer; the note under the stream says what the rest of its text is.
#
# **Steer it yourself** while it plays: a button makes the live engine write that tag into the model's own output from its next token; the hook traps it at `>` and the blocks read change the step after. A button that can't do anything now (the mode is already that, the request has finished, you are looking at an earlier step) is greyed out and the reason is shown. Try FOCUS on a chunk that does not hold the answer, and watch what the model copies next.

# %%
# LIVE = True: the hook below runs inside a real vLLM engine in this kernel
# (Run All again reuses it); False: replay TRACE, a recorded run, no vLLM needed
# (00_tour lists the H200 recordings).
LIVE = True
TRACE = "../traces/seed_cpu.jsonl.gz"
from da_lab.lesson import open_lesson

lab, source, highlight = open_lesson(LIVE, TRACE)

# %%
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Player

hook = DAHookDiagram(source.header, highlight, lab=lab)
blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [hook, blocks])
player.widget

# %% [markdown]
# ## Many readers, one corpus
# Three readers ask about the same chunks of records, each its own question, and each is made to focus the chunk that holds its answer (the director writes `<focus Ck>` first, as a steer button would). They are added together, so the engine schedules them in one batch. vLLM's prefix cache hashes every full block of a prompt by its tokens: the readers' prompts are the same tokens up to their questions, so the second and third reader get the first one's physical blocks. Panel (e) of this diagram 2 draws every request of the step, one block-table row each; a bar marks a physical block that stands in more than one row (in the KV cache (d) too), and hovering one names the rows that hold it. The lesson's request above, if it is still running, is in the batch too: a prefix is shared only while the tokens are the same from the prompt's start, so with its other records it shares the scaffold head alone.

# %%
READERS = "../traces/readers_cpu.jsonl.gz"    # replayed when LIVE = False
from da_lab.lesson import open_readers

readers, names = open_readers(lab, source, READERS)    # live: added together, one batch
batch = BlocksDiagram(readers.header, highlight, req=names[0], batch=True)
reading = Player(readers, [batch])     # live: runs the readers' first step, the prefill
reading.widget

# %% [markdown]
# **Predict, then run.** How many physical blocks do the three readers' rows hold between them (without a prefix cache: the sum of their prompts' blocks)? Type a number, run the cell: it moves the player to the readers' step 8 (all three in FOCUS by then) and counts the distinct block ids in their staged rows (until you guess, it moves nothing).

# %%
PREDICT = None          # a number
from da_lab.predict import check, guessed, step_to

if guessed(PREDICT, "the physical blocks the three readers' rows hold between them"):
    k, r = step_to(reading, 8, names[0])       # run again: the same step, no further
    rows = [q for q in readers.records[reading.i].requests if q.req in names]
    held = {int(p) for q in rows for p in q.staged_row}
    shared = set.intersection(*({int(p) for p in q.staged_row} for q in rows))
    check(PREDICT, len(held), "the physical blocks the readers' rows hold",
          f"{len(shared)} blocks in all three rows, one of its own each")
    for q in rows:
        read = [int(q.staged_row[b]) for b in q.kept]
        wrote = "".join(x.new_text or "" for rec in readers.records[:reading.i + 1]
                        for x in rec.requests if x.req == q.req)
        print(f"{q.req} at its step {k}, {q.mode}: staged row {q.staged_row.tolist()}, "
              f"kernel reads {read}; wrote: {wrote!r}")

# %% [markdown]
# ## Where a step's time goes
# The same tiny model at ~5,400 tokens of context, in a separate process: decode steps timed under GLOBAL, then under `<focus C3>`, on this machine, now; ten steps of each run under torch's profiler, which says how much of a step the attention kernel is. A timing is only as good as the machine is quiet: the cell prints each mode's spread over its 60 steps and says when the run is too noisy to read (other work on the cores, or the two modes' step times overlapping).

# %%
import os, time
import plotly.graph_objects as go
from da_lab.bench.speed import measure
from da_lab.lesson import speed_lines

# This kernel's live engine keeps running; the speed run starts its own (a bigger KV cache).
t0, load0 = time.perf_counter(), os.getloadavg()[0]
speed = measure(chunk_blocks=14, steps=60)
speed_load = (load0, os.getloadavg()[0])
print(f"measured in {time.perf_counter() - t0:.0f} s on {os.cpu_count()} CPUs, load average "
      f"{speed_load[0]:.1f} -> {speed_load[1]:.1f}")
g = speed["modes"]["global"]
print(f"{speed['context_tokens']} prompt tokens: 1 block of scaffold, 12 chunks of 14 blocks, "
      f"1 of question, then the response; GLOBAL read {g['blocks_read'][-1]} blocks at its "
      "last step")
print("\n".join(speed_lines(speed, speed_load, os.cpu_count())))
legend = {"global": "GLOBAL", "focus": "<focus C3>"}
fig = go.Figure([go.Scatter(y=m["step_ms"], name=legend.get(k, k))
                 for k, m in speed["modes"].items()])
fig.update_layout(title=f"decode step time at {speed['context_tokens']} tokens ({speed['engine']})",
                  xaxis_title="decode step", yaxis_title="ms", height=350)
fig.show()

# %% [markdown]
# **Predict, then run.** Under `<focus C3>` the kernel reads the scaffold, chunk C3 and the question, and the response. How many blocks did it read at its last step? Type your number, run the cell: until you do, it shows neither the count nor the profile.

# %%
PREDICT = None          # your number
import statistics
from da_lab.predict import check, guessed

if guessed(PREDICT, "the blocks FOCUS read at its last step"):
    f = speed["modes"]["focus"]
    check(PREDICT, f["blocks_read"][-1], "the blocks FOCUS read at its last step",
          f"GLOBAL's {g['blocks_read'][-1]} less the 11 hidden chunks of 14")
    for k, m in speed["modes"].items():
        p = m["profile"]
        print(f"{k:>6}: {m['blocks_read'][-1]:>3} blocks read, median step "
              f"{statistics.median(m['step_ms']):.2f} ms | profiled: attention "
              f"{p['attention_ms']:.2f} of {p['step_ms']:.2f} ms ({p['attention_share']:.0%}), "
              f"all torch ops {p['torch_ops_ms']:.2f} ms, the rest Python (scheduling, the "
              "hook, sampling)")
    print(speed_lines(speed, speed_load, os.cpu_count())[-1])     # how far to trust these

# %% [markdown]
# For this 3M-parameter model the attention kernel is a small part of a step, so reading fewer blocks saves only that part (the committed run: `bench/results/speed-cpu-2026-12-02.json`, 2 CPU cores at load 1.2). On a GPU with a real model at long context, attention is most of a step; the committed H200 run (`da-lab bench`, the command below, vLLM 0.26, an 8B-shaped Llama, 64k tokens, batch 8):

# %%
import json

h200 = json.load(open("../bench/results/bench-64k-b8-2026-11-30.json"))
rows = {r["mode"]: r for r in h200["rows"]}
for k in ("global", "focus"):
    r = rows[k]
    attn, step = r["attn_ms_per_step"], r["step_ms"]
    print(f"{k:>6}: {r['kv_blocks_read_per_step']:>7.0f} blocks read a step, step {step:.1f} ms,"
          f" attention {attn:.1f} ms ({attn / step:.0%}), {r['decode_tok_s']:.0f} tokens/s")
print(f"FOCUS decodes {h200['ratios'][0]['focus/global']}x as fast as GLOBAL "
      f"({h200['device']}, {h200['vllm']}, {h200['date'][:10]})")
print("on a GPU, measure it yourself:", h200["command"].split(" --out")[0])

# %% [markdown]
# ## What you can now explain
# - How a tag in the output becomes a shorter block-table row for the kernel.
# - Why FOCUS keeps the scaffold, the named chunks and the response, and LOCAL only the scaffold and the response.
# - Why several readers of one corpus cost one copy of its KV: the prefix cache maps each reader's prompt onto the same physical blocks, while DA still gives each reader's kernel its own row, its own chunk.
# - Why reading fewer blocks speeds a step only by the attention kernel's share of it: small for the tiny model on a CPU, most of a step at 64k tokens on an H200.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
