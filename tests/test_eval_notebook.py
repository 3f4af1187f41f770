"""Notebook 06's helpers (da_lab.training.eval.nl_demo), without an engine: a learner's documents
become exactly the prompt SmolLM2-DA was trained on; bad input gets a clear message; the
end-of-turn wrapper; the eval table read from committed documents; the shipped trace."""

import gzip
import json
from pathlib import Path

import pytest

from da_lab.training.data import nl_task as N
from da_lab.training.eval import nl_demo

ROOT = Path(__file__).resolve().parents[1]


def test_typed_documents_give_the_training_prompt():
    exs = nl_demo.examples()
    assert [e["kind"] for e in exs] == ["single", "multi", "local"]
    for e in exs:
        typed = "\n\n".join(e["documents"])
        # what a learner sees in the box, edited only in whitespace, gives the same tokens
        typed = typed.replace(". ", ".  ", 3) + "\n\n\n"
        p = nl_demo.user_prompt(nl_demo.split_documents(typed), "  " + e["question"])
        assert p.token_ids == e["token_ids"]
        assert p.layout.n_chunks == len(e["documents"])
    p = nl_demo.user_prompt(["Ann Lee was born in 1970.", "Bo Sun was born in 1980."],
                            "In which year was Bo Sun born?")
    assert p.layout.n_chunks == 2 and "Document C2: Bo Sun" in p.chunks[1]
    assert nl_demo.split_documents("Document C4: a\n\n  \n\nb  c") == ["a", "b c"]


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match="at least one document"):
        nl_demo.user_prompt(["  "], "q?")
    with pytest.raises(ValueError, match="give a question"):
        nl_demo.user_prompt(["a document"], " ")
    with pytest.raises(ValueError, match="trained on at most"):
        nl_demo.user_prompt(["word " * 4000, "more " * 4000], "q?")


def test_end_of_turn_aborts_a_request_once_it_wrote_the_token():
    class Lab:          # only the attributes the wrapper reads: it never touches vLLM itself
        def __init__(self):
            self.requests = {"a": {"finished": False, "token_ids": []},
                             "b": {"finished": False, "token_ids": []}}
            self.aborted, self.steps = [], 0

        def step(self):
            self.steps += 1
            self.requests["a"]["token_ids"].append(7 if self.steps == 2 else 1)
            self.requests["b"]["token_ids"].append(1)
            return self.steps

        def abort(self, da_id):
            self.aborted.append(da_id)
            self.requests[da_id]["finished"] = True

    lab = Lab()
    w = nl_demo.EndOfTurn(lab, eos_id=7)
    assert w.step() == 1 and lab.aborted == []
    assert w.step() == 2 and lab.aborted == ["a"]
    w.step()
    assert lab.aborted == ["a"] and w.requests is lab.requests     # the rest is the Lab's
    assert nl_demo.reply("<focus C2> It is 7.<|im_end|>\nsystem") == "<focus C2> It is 7."
    assert nl_demo.EndOfTurn(lab).eos_id == N.tokens().eos_id


def test_eval_summary_reads_the_committed_documents():
    files = sorted((ROOT / "bench" / "results").glob("eval-smollm2-*.json*"))
    assert files, "bench/results/eval-smollm2-*.json: the CPU eval must be committed"
    assert any(f.suffix == ".gz" for f in files) and any(f.suffix == ".json" for f in files)
    rows = nl_demo.eval_summary(files)
    for f, r in zip(files, rows, strict=True):
        doc = json.loads(gzip.decompress(f.read_bytes()) if f.suffix == ".gz" else f.read_text())
        assert r["file"] == f.name.removesuffix(".gz")
        assert r["n"] == doc["n"] == len(doc["rows"])
        assert r["right tag"] == doc["tag_accuracy"]
        assert r["ablation: wrong tag forced"] == doc["wrong_tag_answer_accuracy"]
        assert r["base model, plain prompt"] == doc["base_all_blocks_answer_accuracy"]


def test_the_shipped_trace_shows_the_model_writing_its_own_tag():
    from da_lab.cli import demo_rows
    from da_lab.trace import load

    path = ROOT / "traces" / "smollm2_da_cpu.jsonl.gz"
    assert path.stat().st_size < 300_000
    tr = load(path)
    assert tr.provenance["model_name"] == "smollm2-da"
    (added,) = [a for r in tr for a in r.added]
    assert added["tags"] == []                                  # no director: its own tag
    rows = demo_rows(tr.records, added["req"])
    modes = [r["mode"] for r in rows]
    assert modes[0] == "global" and "focus" in modes
    focus = [r for r in rows if r["mode"] == "focus"]
    assert all(r["blocks_read"] < r["blocks_total"] for r in focus)
    text = "".join(r["text"] for r in rows)
    assert text.lstrip().startswith("<focus C")
