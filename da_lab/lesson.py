"""The notebooks' requests: what a learner runs, steers, and adds with "new request".

With the trained model (da-tiny-tags, the default) a lesson request is a held-out question of the
task it learned (da_lab/training/data/task.py): a scaffold, 12 one-block chunks of `C<k> <key>
<value>.` records, and a question. Nobody writes its tags: the model writes `<focus Ck>` itself,
then the answer, then `</s>`. The Lab ignores `</s>` (ignore_eos), so the request runs on for
LESSON_TOKENS tokens and there is time to steer it; after its answer the model, which never
learned what comes next, babbles fragments of the records it can still see.

With any other model (the random da-tiny-v1 that the tests pin, a folder in DA_LAB_MODEL) it is
the seed scenario: 12 chunks of "key has value" records, a question, and the director's script
SEED_TAGS, since such a model writes no tags of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The seed scenario's script: GLOBAL -> <focus C3,C7> -> <local> -> <global>.
SEED_TAGS = [(4, "<focus C3,C7>"), (16, "<local>"), (28, "<global>")]
# 200 tokens: about 80 s of play at the player's 400 ms a step, time to steer several times.
LESSON_TOKENS = 200
LESSON_SEED = 20261201          # the held-out stream's seed for lesson questions


@dataclass
class Lesson:
    da_id: str
    text: str           # what the learner should know about this request, in two sentences

    def __str__(self) -> str:
        return self.text


def writes_own_tags(model: str | Path) -> bool:
    """Is `model` the trained da-tiny-tags (the only model whose task prompts we can build)?"""
    from da_lab.models.tiny import TRAINED_DIR

    return Path(model).resolve() == TRAINED_DIR.resolve()


def lesson_question(k: int):
    """The k-th lesson question: held-out single-chunk questions whose answer is not in C1
    (so FOCUS on C1 always differs from the model's own tag; the browser test steers it)."""
    from da_lab.training.data import task

    found, i = -1, 0
    while True:
        s = task.sample(LESSON_SEED, i, task.HELDOUT)
        i += 1
        if s.kind == "single" and s.directive.chunks != (1,):
            found += 1
            if found == k:
                return s


def _free_id(lab, prefix: str) -> tuple[int, str]:
    k = 1
    while f"{prefix}{k}" in lab.requests:
        k += 1
    return k, f"{prefix}{k}"


def add_lesson_request(lab, max_tokens: int = LESSON_TOKENS) -> Lesson:
    """Add the next lesson request to a running Lab; returns its id and what to say about it."""
    name = Path(lab.model).name
    if writes_own_tags(lab.model):
        k, da_id = _free_id(lab, "q")
        s = lesson_question(k - 1)
        lab.add_request(s.prompt, max_tokens=max_tokens, request_id=da_id)
        question = s.prompt.tail.strip().removeprefix("Question:").split("Answer:")[0].strip()
        return Lesson(da_id, (
            f"{da_id}: 12 chunks of records, then the question “{question}” (the answer is in "
            f"{s.tag[len('<focus '):-1]}). {name} was trained to write {s.tag} {s.answer} and "
            f"stop; the lab ignores its stop token, so {da_id} runs {max_tokens} tokens: after "
            "the answer the model babbles fragments of the records it can still see. Steer it "
            "while it runs."))
    _k, da_id = _free_id(lab, "seed")
    tags = [(at, t) for at, t in SEED_TAGS if at + len(lab.encode(t)) < max_tokens]
    lab.add_request(lab.seed_prompt(), tags=tags, max_tokens=max_tokens, request_id=da_id)
    script = ", ".join(f"{t} at token {at}" for at, t in tags)
    return Lesson(da_id, (
        f"{da_id}: 12 chunks of records, then a question, {max_tokens} tokens. {name} writes no "
        f"tags of its own (random weights write noise), so the director writes them: "
        f"{script or 'none'}. Steer it while it runs."))


def open_lesson(live: bool, trace: str):
    """A lesson's first cell: (lab, source, highlight). `live`: this kernel's vLLM engine
    (one_lab: Run All again reuses it) with a lesson request added, streamed to the diagrams
    (the player's "new request" adds another); otherwise `trace` replayed, no vLLM needed.
    Prints the request and what ran it."""
    from da_lab_widgets import Highlight, LiveSource, TraceSource

    if live:
        from da_lab.engine.one_lab import one_lab

        lab = one_lab(progress=True)      # the default model: da-tiny-tags, trained to write tags
        print(add_lesson_request(lab))    # a held-out question, 200 tokens: time to steer it
        source = LiveSource(lab, new_request=add_lesson_request)
    else:
        lab, source = None, TraceSource(trace)
    prov = source.header["provenance"]
    print(prov.get("model_name"), "|", prov["vllm"], "|", prov["runner"])
    return lab, source, Highlight()


# ---- many readers, one corpus (lesson 04) ---------------------------------------------------
READER_CHUNKS = (3, 7, 11)      # the chunk each reader focuses, one reader each
READER_TOKENS = 12              # the tag, the answer and a little more: a few engine steps


def _with_tail(p, tail: str, encode):
    """`p` with its question replaced: the same token ids up to the tail, then `tail`'s."""
    from dataclasses import replace

    from da_lab.core.layout import DAPrompt

    ids = p.token_ids[:p.layout.tail_start * p.layout.block_size] + encode(tail)
    return DAPrompt(replace(p.layout, prompt_len=len(ids)), ids, p.head, p.chunks, tail)


def reader_corpus(lab) -> tuple:
    """(the corpus as a DAPrompt, [(question, chunk holding its answer, answer)] per reader).
    The trained model: a held-out task prompt (another seed than the lesson questions, so no
    lesson request shares its blocks), one record asked from each of READER_CHUNKS. Any other
    model: the seed scenario's chunks and its kind of question."""
    if writes_own_tags(lab.model):
        from da_lab.training.data import task

        s = task.sample(LESSON_SEED + 1, 0, task.HELDOUT)
        first = {}
        for c, key, value in s.meta["records"]:
            first.setdefault(c, (key, value))
        return s.prompt, [(f" Question: value of {first[c][0]}? Answer:", c,
                           f"{first[c][0]} {first[c][1]}") for c in READER_CHUNKS]
    # seed_texts' chunk Ck holds "key 10k has value (37k mod 100)" first
    return lab.seed_prompt(), [(f" Question: What is the value of key {c * 10}? Answer:", c,
                                f"{(c * 37) % 100}") for c in READER_CHUNKS]


def add_readers(lab, max_tokens: int = READER_TOKENS) -> list[str]:
    """Add one reader per READER_CHUNKS entry to a running Lab, all before the next engine step
    (so they are scheduled in one batch): the same corpus, each its own question, each made to
    focus the chunk holding its answer (the director writes `<focus Ck>` first, as a steer
    button would). Returns their ids: reader-1, reader-2, ..."""
    corpus, questions = reader_corpus(lab)
    ids = []
    for k, (question, c, _answer) in enumerate(questions, start=1):
        da_id = f"reader-{k}"
        if da_id in lab.requests and not lab.requests[da_id]["finished"]:
            lab.abort(da_id)                 # a cell run again: the old reader goes
        lab.add_request(_with_tail(corpus, question, lab.encode), tags=[(0, f"<focus C{c}>")],
                        max_tokens=max_tokens, request_id=da_id)
        ids.append(da_id)
    return ids


def open_readers(lab, source, trace: str):
    """Lesson 04's readers: (their source, their ids). Live (`lab` not None): a branch of the
    lesson's `source` (the same engine; every step recorded for both players) with the readers
    added; otherwise `trace`, their recorded run. Prints each reader's prompt as its request
    carries it (the layout and the director's tag; the question too when live)."""
    from da_lab.core.layout import Layout

    if lab is not None:
        readers = source.branch()
        names = add_readers(lab)
        asks = {n: q.strip().removeprefix("Question:").removesuffix("Answer:").strip()
                for n, (q, _c, _a) in zip(names, reader_corpus(lab)[1], strict=True)}
        added = [dict(req=n, layout=lab.requests[n]["prompt"].layout.to_dict(),
                      tags=[[at, t] for at, _n, t in lab.requests[n]["script"]]) for n in names]
    else:
        from da_lab_widgets import TraceSource

        readers, asks = TraceSource(trace), {}
        added = [a for rec in readers.records for a in rec.added]
        names = [a["req"] for a in added]
    for a in added:
        lay = Layout.from_dict(a["layout"])
        ask = f"asks “{asks[a['req']]}”, " if a["req"] in asks else ""
        print(f"{a['req']}: {ask}{-(-lay.prompt_len // lay.block_size)} blocks of prompt; the "
              f"director writes {a['tags'][0][1]} first")
    print(f"each prompt begins with the same {lay.tail_start} full blocks (the scaffold and "
          f"{lay.n_chunks} chunks of records), then its own question")
    return readers, names


# ---- the speed cell (lesson 04): a measurement says when it is too noisy to read --------------
BUSY_PER_CPU = 1.0      # load average per CPU above which other work shares the cores


def _spread(ms: list[float]) -> tuple[float, float, float]:
    """(p10, median, p90) of a mode's decode step times (ms)."""
    import statistics

    s = sorted(ms)
    if len(s) < 3:
        m = statistics.median(s)
        return m, m, m
    q = statistics.quantiles(s, n=10, method="inclusive")
    return q[0], statistics.median(s), q[-1]


def speed_lines(speed: dict, load: tuple[float, float], cpus: int) -> list[str]:
    """What the speed cell prints about its own reliability: each mode's step times as median
    and the middle 80 % of its steps, then a verdict. Too noisy to read when the machine was
    busy (load average above BUSY_PER_CPU per CPU, before or after) or when the modes' middle
    80 % overlap (the difference between them is inside the noise)."""
    lines, spans = [], {}
    for mode, m in speed["modes"].items():
        lo, med, hi = spans[mode] = _spread(m["step_ms"])
        lines.append(f"{mode:>6}: median decode step {med:.2f} ms; the middle 80% of its "
                     f"{len(m['step_ms'])} steps {lo:.2f}–{hi:.2f} ms")
    why = []
    if max(load) > BUSY_PER_CPU * cpus:
        why.append(f"the machine was busy (load average {load[0]:.1f} → {load[1]:.1f} on "
                   f"{cpus} CPUs: other work took turns on the cores)")
    g, f = spans.get("global"), spans.get("focus")
    if g and f and not (f[2] < g[0] or g[2] < f[0]):
        why.append("GLOBAL's and FOCUS's middle 80% overlap, so their difference is inside "
                   "the noise")
    if why:
        lines.append("⚠ too noisy to read: " + "; ".join(why) + ". Every time here, the "
                     "profile's too, may be off by a factor of two or more; run the cell again "
                     "when the machine is quiet, or read the committed run "
                     "(bench/results/speed-cpu-2026-12-02.json, load 1.2 on 2 CPUs).")
    else:
        lines.append(f"quiet enough to read: load average {max(load):.1f} on {cpus} CPUs, and "
                     "the two modes' middle 80% do not overlap")
    return lines
