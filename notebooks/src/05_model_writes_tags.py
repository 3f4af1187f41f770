# %% [markdown]
# # 5 · A model that writes its own tags
#
# Until now a *director* forced the tags into the output. Here nobody does: the embedded model was trained (`python -m da_lab.training.trainer.train`, task in `da_lab.training.data.task`) to read a question, write `<focus Ck>` naming the chunk that holds the answer (`<local>` when no chunk is needed, `<focus Ci,Cj>` when two are), then answer under the mask its own tag switched on.
#
# The weights ship in `da_lab/assets/da-tiny-tags/` (3M parameters, 6 MB; `training.json` there says how they were made). Set `MODEL = "da-tiny-v1"` below to see the random model try: garbage tags, zeros in the table.

# %%
from da_lab.models.tiny import default_model_name, model_path

MODEL = default_model_name()          # "da-tiny-tags" once trained, else "da-tiny-v1"
print(MODEL, "->", model_path(MODEL))

# %% [markdown]
# ## Live: watch it choose
# One held-out question, no director: the tag buffer fills with what the model writes, traps at `>`, and the row shrinks to the chunk it named. Press ▶ or make your guess below. (How often it chooses right, over many questions, is the eval table at the end.)

# %%
from da_lab.training.data import task
from da_lab.engine.one_lab import one_lab
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Highlight, LiveSource, Player

sample = task.held_out(3)[2]
print(sample.prompt.tail.strip())
lab = one_lab(model_path(MODEL), progress=True)     # Run All again reuses it
da_id = lab.add_request(sample.prompt, max_tokens=len(sample.response_ids), request_id="self-tag")
source = LiveSource(lab)
highlight = Highlight()
hook = DAHookDiagram(source.header, highlight, lab=lab)
blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [hook, blocks])
player.widget

# %% [markdown]
# **Predict, then run.** Read the question printed above: which tag will the model write, `<focus Ck>` for which k (or `<local>`)? Type it, run the cell: it runs the request to its end and compares with the tag the hook trapped.

# %%
PREDICT = None          # e.g. "<focus C4>"
from da_lab.predict import check, guessed

if guessed(PREDICT, "the tag it writes"):
    while player.step():
        pass
    # The request's last record with hook state (on a GPU the engine's final, asynchronous
    # step only returns the last token).
    r = [q for rec in source.records for q in rec.requests if q.req == da_id and q.hooked][-1]
    trapped = [e["text"] for e in lab.request_state(da_id).events if e["kind"] == "tag_trapped"]
    check(PREDICT, trapped[0] if trapped else "(no tag)", "the tag it wrote",
          f"the task's answer: {sample.tag} {sample.answer}")
    print("wrote:", repr(lab.requests[da_id]["text"]))
    print(f"mode {r.mode}, blocks read {r.blocks_read} of {r.blocks_total}")

# %% [markdown]
# ## The eval table
# Held-out prompts (a seed training never drew) through the real engine with the DA hook, each twice: with its DA layout (the hook traps the model's own tag) and with every block visible. The eval sizes an engine for its prompts, so it runs in a process of its own (`da-lab eval --n 40`, the command a shell runs too, with `--n 500`); this kernel's engine and the player above keep running. It takes about a minute on 2 quiet CPU cores, and longer on a busy machine: the cell says what it is doing while it runs.

# %%
import os, time
from da_lab.engine.child import run_json
from da_lab.training.eval.evaluate import table

print(f"running: da-lab eval --n 40 --model {MODEL} in its own process (a fresh engine, "
      "40 prompts, each with its DA layout and with every block visible) ...")
t0, load0 = time.perf_counter(), os.getloadavg()[0]
res = run_json(["-m", "da_lab.cli", "eval", "--n", "40", "--model", str(model_path(MODEL)),
                "--json"], what="da-lab eval")
print(f"done in {time.perf_counter() - t0:.0f} s on {os.cpu_count()} CPUs, load average "
      f"{load0:.1f} -> {os.getloadavg()[0]:.1f}")
print(table(res))
for row in res["rows"][3:9]:      # not the live question above (the eval's third)
    print(f"{row['kind']:<7} expected {row['expected_tag']} {row['expected_answer']!r:<14} "
          f"wrote {row['text']!r}")

# %% [markdown]
# ## What you can now explain
# - How a model can decide where to look: the tag is just text it learned to write, and the hook turns it into a shorter block-table row one step after its `>`.
# - Why training must apply the same mask as the hook, position by position, for the model to answer under its own tag.
# - What tag accuracy, answer accuracy under DA and with every block visible each measure, and why reading fewer blocks need not cost accuracy.

# %% [markdown]
# When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); Run All again reuses the running one.
