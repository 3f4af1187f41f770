"""`da-lab eval --prompts FILE.jsonl` without an engine: every malformed line is one line of
error naming the line and the field (from the module and from the CLI, before any engine
starts); a generated sample written as a line rebuilds the very prompt it came from; the
answer rule on a file's answer / wrong values; the summary's local accuracy, foreign words and
per-set rows; and the hand-written file keeps the shape it promises."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_task as N
from da_lab.training.data.nl_gen import registry
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval.evaluate import summary

ROOT = Path(__file__).resolve().parents[1]
HANDWRITTEN = ROOT / "bench" / "data" / "handwritten-prompts.jsonl"
GOOD = {"documents": ["Ann Lee was born in 1970.", "Bo Sun was born in 1980."],
        "question": "In which year was Bo Sun born?", "answer": ["1980"], "needs": [2],
        "wrong": ["1970"]}

BAD = [
    ("{not json", "not JSON"),
    ("[1, 2]", "a line must be a JSON object"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "needs"}), "field 'needs' is missing"),
    (json.dumps({**GOOD, "documents": []}), "field 'documents' must not be empty"),
    (json.dumps({**GOOD, "documents": ["a", "  "]}), "field 'documents' item 2"),
    (json.dumps({**GOOD, "documents": "one text"}), "field 'documents' must be a list"),
    (json.dumps({**GOOD, "question": ""}), "field 'question'"),
    (json.dumps({**GOOD, "answer": "1980"}), "field 'answer' must be a list"),
    (json.dumps({**GOOD, "answer": []}), "field 'answer' must name the expected values"),
    (json.dumps({**GOOD, "needs": [3]}), "field 'needs': document 3 is not among the 2"),
    (json.dumps({**GOOD, "needs": [0]}), "field 'needs': document 0"),
    (json.dumps({**GOOD, "needs": ["2"]}), "field 'needs' must be a list of document numbers"),
    (json.dumps({**GOOD, "needs": [2, 2]}), "field 'needs' repeats"),
    (json.dumps({**GOOD, "needs": 2}), "field 'needs' must be a list"),
    (json.dumps({**GOOD, "wrong": ["1980"]}), "field 'wrong' holds an expected value"),
    (json.dumps({**GOOD, "wrong": [7]}), "field 'wrong' item 1"),
    (json.dumps({**GOOD, "id": 5}), "field 'id' must be a non-empty string"),
    (json.dumps({**GOOD, "answers": ["1980"]}), "field 'answers' is not known"),
    ('{"documents": [' + "7" * 5000 + "]}", "not JSON (Exceeds the limit"),
    ("[" * 100000, "not JSON (nested too deeply"),
]


@pytest.mark.parametrize("line,message", BAD)
def test_a_malformed_line_is_one_line_naming_the_line_and_field(tmp_path, line, message):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(GOOD) + "\n\n" + line + "\n" + json.dumps(GOOD) + "\n")
    with pytest.raises(P.PromptFileError) as e:
        P.load(f)
    text = str(e.value)
    assert text.startswith(f"{f}:3: ") and message in text and "\n" not in text


def test_the_cli_refuses_a_bad_file_before_any_engine(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(GOOD) + "\n" + json.dumps({**GOOD, "needs": [5]}) + "\n")
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    p = subprocess.run([sys.executable, "-m", "da_lab.cli", "eval", "--model", "smollm2-da",
                        "--prompts", str(f), "--json"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.strip().splitlines()[-1] == (
        f"da-lab: {f}:2: field 'needs': document 5 is not among the 2 documents (1..2)")
    for extra, msg in ((["--domains", "heldout"], "no --context, --chunks, --domains"),
                       (["--model", "da-tiny-tags"], "needs a chat model")):
        argv = ["eval", "--model", "smollm2-da", "--prompts", str(f), *extra]
        p = subprocess.run([sys.executable, "-m", "da_lab.cli", *argv], capture_output=True,
                           text=True, env=env, timeout=300)
        assert p.returncode == 2 and msg in p.stderr.strip().splitlines()[-1], p.stderr


def test_a_generated_sample_as_a_line_rebuilds_the_same_prompt():
    for split in ("train", "heldout"):
        for i, s in enumerate(G.held_out(12, split=split, context=(600, 1500))):
            rec = json.loads(json.dumps(P.record(s, split, f"x{i}")))
            assert P.check(rec) is None
            t = P.to_sample(rec)
            assert t.prompt.token_ids == s.prompt.token_ids
            assert (t.tag, t.directive, t.kind, t.keys) == (s.tag, s.directive, s.kind, s.keys)
            assert t.meta["candidates"] == s.meta["candidates"]
            assert N.answer_correct(s.answer, t) and t.meta["set"] == split


def test_the_answer_rule_on_a_files_values(tmp_path):
    f = tmp_path / "p.jsonl"
    lines = [GOOD, {**GOOD, "question": "Born when, Ann and Bo?", "answer": ["1970", "1980"],
                    "needs": [1, 2], "wrong": []},
             {"documents": ["Ann Lee was born in 1970."], "question": "Hello!", "answer": [],
              "needs": [], "wrong": ["1970"]}]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    one, two, chat = P.samples(f)
    assert (one.tag, two.tag, chat.tag) == ("<focus C2>", "<focus C1,C2>", "<local>")
    assert (one.kind, two.kind, chat.kind) == ("single", "multi", "local")
    assert one.meta["id"] == "p.jsonl:1" and one.meta["holders"] == [2]
    assert N.answer_correct("Bo Sun was born in 1980.", one)
    assert not N.answer_correct("Bo Sun was born in 1970.", one)
    assert not N.answer_correct("In 1980 or 1970.", one)
    assert N.answer_correct("Ann in 1970 and Bo in 1980.", two)
    assert not N.answer_correct("Bo in 1980 and Ann in 1970.", two)
    assert N.answer_correct("Hello! How can I help?", chat)
    assert not N.answer_correct("Ann was born in 1970.", chat)
    assert N.foreign_words("Bo Sun has 1980 inhabitants.", one) == ["inhabitants"]
    assert N.foreign_words("Bo Sun was born in 1980.", one) == []


def _row(kind, set_, tag, correct, foreign=None):
    return {"kind": kind, "set": set_, "tag_correct": tag, "correct": correct,
            "all_blocks_correct": False, "base_correct": None, "wrong_tag_correct": None,
            "hidden_chunk_correct": None, "wrong_tag_chance": None, "flags": [],
            "foreign_words": None if kind == "local" else (foreign or []), "_fractions": [0.5]}


def test_summary_has_local_accuracy_foreign_words_and_sets():
    rows = [_row("local", "a", True, True), _row("local", "a", False, False),
            _row("single", "a", True, True, ["inhabitants"]), _row("single", "b", True, True),
            _row("multi", "b", False, False)]
    s = summary(rows)
    assert s["n"] == 5 and s["local_accuracy"] == 0.5
    assert s["foreign_word_rate"] == pytest.approx(1 / 3)
    assert set(s["by_set"]) == {"a", "b"}
    a, b = s["by_set"]["a"], s["by_set"]["b"]
    assert a["n"] == 3 and a["local_accuracy"] == 0.5 and a["foreign_word_rate"] == 1.0
    assert b["n"] == 2 and b["local_accuracy"] is None and b["tag_accuracy"] == 0.5
    assert a["by_kind"]["local"]["n"] == 2


def test_the_hand_written_file_keeps_its_promises():
    """>= 40 prompts across >= 8 domains none of which is a training domain; 4-16 documents and
    1k-5k tokens each; several phrasings; two-document and >= 8 no-document questions; answers
    that are people's names."""
    recs = P.load(HANDWRITTEN)
    ss = P.samples(HANDWRITTEN)
    assert len(recs) >= 40
    sets = {r["set"] for r in recs}
    train, _ = registry()
    assert len(sets - {"no document"}) >= 8
    assert not {x.split(" ")[0].rstrip("s") for x in sets} & set(train)
    for r, s in zip(recs, ss, strict=True):
        assert 4 <= len(r["documents"]) <= 16, r["id"]
        assert 1000 <= s.prompt.layout.prompt_len <= 5000, (r["id"], s.prompt.layout.prompt_len)
    kinds = [s.kind for s in ss]
    assert kinds.count("local") >= 8 and kinds.count("multi") >= 4
    assert len({r["question"].split()[0] for r in recs}) >= 6          # phrased several ways
    people = [r for r in recs if r.get("id", "").endswith("-person")]
    assert len(people) >= 6


def test_paper_protocol_lines(tmp_path):
    """"protocol": "paper" builds the paper's Magic Chunk prompt (unpadded spans) and scores
    the paper's reply: the chunk it focused, the text inside <answer>."""
    from da_lab.training.eval import eval_prompts as EP
    from da_lab.training.eval.evaluate import answer_text

    rec = {"documents": ["Mara Olsen coaches Kilbride Albion.", "It was founded in 1902."],
           "question": "Who coaches Kilbride Albion?", "answer": ["Mara Olsen"], "needs": [1],
           "protocol": "paper"}
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(rec) + "\n" + json.dumps(dict(rec, protocol="xml")) + "\n")
    with pytest.raises(EP.PromptFileError, match=":2: field 'protocol' must be one of card"):
        EP.load(f)
    f.write_text(json.dumps(rec) + "\n")
    s = EP.samples(f)[0]
    assert s.prompt.layout.unaligned and s.tag == '<focus magic_chunks="1">'
    a, b = s.prompt.layout.chunk_spans[0]
    assert "Mara Olsen coaches" in EP.N.tokens().tok.decode(s.prompt.token_ids[a:b])
    reply = ('<global> C1 names the coach. <focus magic_chunks="1"> Mara Olsen </focus>'
             "<local> so <answer>Mara Olsen</answer></local>")
    d, ans = answer_text(reply, 2, "paper")
    assert d == s.directive and ans == "Mara Olsen"
    assert answer_text(reply, 2)[0].mode.value == "global"      # the card reads the first tag


def test_generated_lines_in_the_paper_protocol_carry_it(capsys, tmp_path):
    """`eval_prompts --protocol paper` writes the same prompts as the card's, marked "paper",
    so both dialects are scored on one set of documents and questions."""
    from da_lab.training.eval import eval_prompts as EP

    assert EP.main(["--n", "3", "--split", "heldout", "--set", "x"]) == 0
    card = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert EP.main(["--n", "3", "--split", "heldout", "--set", "x", "--protocol", "paper"]) == 0
    paper = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r.pop("protocol") for r in paper] == ["paper"] * 3
    assert "protocol" not in card[0] and paper == card
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(dict(paper[0], protocol="paper")) + "\n")
    assert "Magic Chunk 1:" in EP.N.tokens().tok.decode(EP.samples(f)[0].prompt.token_ids)


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\u0085"])
def test_a_line_holding_a_raw_unicode_line_separator_in_a_string_is_read(tmp_path, sep):
    """Lines end at "\n" only: str.splitlines() cut such a line in two ("not JSON")."""
    rec = {**GOOD, "question": f"In which year{sep}was Bo Sun born?"}
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(GOOD) + "\n" + json.dumps(rec, ensure_ascii=False) + "\r\n",
                 encoding="utf-8")
    got = P.load(f)
    assert [r["_line"] for r in got] == [1, 2] and got[1]["question"] == rec["question"]


def test_prompts_that_are_no_file_are_called_what_they_are(tmp_path):
    from types import SimpleNamespace

    from da_lab.cli_eval import _eval_args

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, says in ((tmp_path, "is a folder"), (fifo, "is a FIFO"),
                       ("/dev/null", "is a device"), (tmp_path / "nope", "no such file")):
        args = SimpleNamespace(out=None, n=None, wave=None, max_tokens=None, context=None,
                               chunks=None, domains=None, prompts=str(path), device="auto",
                               block_size=None)
        assert _eval_args(args) == ({}, f"--prompts {path}: {says}" + (
            ", not a prompts file (one JSON object per line)" if "is a" in says else ""))


def test_eval_split_keeps_each_dialects_sets_apart(tmp_path):
    """One run over both dialects splits into one document per set and dialect, each with its
    summary recomputed from its own rows."""
    from da_lab.training.eval import eval_split as S

    assert S.group_of("hand-written/zoos") == "hand-written"
    assert S.group_of("paper/hand-written/zoos") == "paper/hand-written"
    assert S.group_of("paper") == "paper" and S.group_of(None) == "ungrouped"
    # two rows of a committed run, as if one were from the paper's sets
    done = json.loads((ROOT / "bench/results/eval-zeroshot-smollm2-paper-hand-2026-12-04.json")
                      .read_text())
    row = next(r for r in done["rows"] if r["kind"] == "single")
    doc = dict(done, rows=[dict(row, set="in-domain/band", correct=True),
                           dict(row, set="paper/in-domain/band", correct=False)])
    f = tmp_path / "e.json"
    f.write_text(json.dumps(doc))
    assert S.main([str(f), "--stem", "e"]) == 0
    card = json.loads((tmp_path / "e-in-domain.json").read_text())
    paper = json.loads((tmp_path / "e-paper-in-domain.json").read_text())
    assert card["n"] == paper["n"] == 1
    assert card["da_answer_accuracy"] == 1.0 and paper["da_answer_accuracy"] == 0.0
    # an --out-dir that does not exist yet is made
    assert S.main([str(f), "--stem", "e", "--out-dir", str(tmp_path / "new" / "dir")]) == 0
    assert (tmp_path / "new" / "dir" / "e-paper-in-domain.json").is_file()
