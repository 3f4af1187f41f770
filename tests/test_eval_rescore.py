"""The answer rule's restated-phrase exception and `eval_rescore`: a value word inside the
entity's name ("textiles" in "Kovac Textiles") or in the restated sum ("25 divided by 5") is not
a mention, a value the reply states still is, and a list the question asks to reorder counts;
an eval document is rescored from the prompts file it ran on, row by row, with rows whose
prompt changed left as they were; and the committed 2026-12-06 held-out eval, rescored from
prompts written again here, changes in exactly the row the old rule misread."""

import json
import subprocess
import sys
from pathlib import Path

from da_lab.training.data import nl_task as N
from da_lab.training.eval import eval_prompts as P
from da_lab.training.eval import eval_rescore as R
from da_lab.training.eval.evaluate import load_document

ROOT = Path(__file__).resolve().parents[1]
KOVAC = {"id": "k", "documents": ["Kovac Textiles works in telecoms.",
                                  "Lark Mills works in textiles."],
         "question": "Which sector is Kovac Textiles in?", "answer": ["telecoms"], "needs": [1],
         "wrong": ["textiles"]}


def _sample(tmp_path, rec=KOVAC):
    f = tmp_path / "p.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    return f, P.samples(f)[0]


def test_a_value_inside_the_restated_name_is_not_a_mention(tmp_path):
    _, s = _sample(tmp_path)
    assert N.answer_values("The sector of Kovac Textiles is telecoms.", s) == ["telecoms"]
    assert N.answer_correct("Kovac Textiles is in telecoms.", s)
    assert N.answer_correct("Telecoms.", s)
    # A value the reply states is still one, even beside the name or at the sentence's end.
    assert not N.answer_correct("Kovac Textiles is in textiles.", s)
    assert not N.answer_correct("Kovac Textiles: textiles and telecoms.", s)
    assert not N.answer_correct("It is textiles, not telecoms.", s)
    # Only a phrase the question holds is skipped: another company's name is not restated.
    assert not N.answer_correct("Kovac Textiles is telecoms, like Mills textiles.", s)


def test_a_restated_sum_is_not_its_answer_and_a_reordered_list_is(tmp_path):
    sums = {"id": "s", "documents": ["x"], "question": "Quick sum: 25 divided by 5?",
            "answer": ["5"], "needs": [], "wrong": []}
    _, s = _sample(tmp_path, sums)
    assert N.answer_correct("25 divided by 5 is 5.", s)        # "by 5" is the question's
    assert not N.answer_correct("25 divided by 5 is 6.", s)
    _, m = _sample(tmp_path, dict(sums, question="86 minus 43?", answer=["43"]))
    assert not N.answer_correct("86 minus 43 is 41.", m)
    words = dict(sums, question="Put these words in alphabetical order: kiwi, cherry, date.",
                 answer=["cherry", "date", "kiwi"])
    _, w = _sample(tmp_path, words)
    assert N.answer_correct("In alphabetical order: cherry, date, kiwi.", w)
    assert not N.answer_correct("Kiwi, cherry, date.", w)


def _doc(rows):
    return {"command": "test", "n": len(rows), "da_answer_accuracy": None, "rows": rows}


def _row(s, answer, correct, **kw):
    return {"id": s.meta["id"], "set": None, "kind": s.kind, "question": s.meta["question"],
            "expected_values": list(s.keys), "n_chunks": 2, "tag_correct": True,
            "answer": answer, "correct": correct, "all_blocks_text": None,
            "all_blocks_correct": None, "base_text": None, "base_correct": None,
            "wrong_tag_correct": None, "hidden_chunk_correct": None, "wrong_tag_chance": None,
            "flags": [], "foreign_words": [], "blocks_read_fraction_after_tag": 0.5, **kw}


def test_rescore_flips_verdicts_and_leaves_unmatched_rows(tmp_path):
    _, s = _sample(tmp_path)
    misread = _row(s, "The sector of Kovac Textiles is telecoms.", False,
                   all_blocks_text="<focus C1> The sector of Kovac Textiles is telecoms.",
                   all_blocks_correct=False)
    stale = dict(_row(s, "telecoms", False), expected_values=["mining"])
    new, report = R.rescore(_doc([misread, stale]), {"k": s})
    assert new["rows"][0]["correct"] is True and new["rows"][0]["all_blocks_correct"] is True
    assert new["rows"][1]["correct"] is False                       # its prompt changed
    assert report == ["k: correct False -> True: 'The sector of Kovac Textiles is telecoms.'",
                      "k: all_blocks_correct False -> True: "
                      "'The sector of Kovac Textiles is telecoms.'",
                      "1 of 2 rows have no matching prompt: left as they were"]
    assert new["da_answer_accuracy"] == 0.5 and new["rescored"]["changes"] == report


def test_the_12_06_held_out_eval_rescored_from_prompts_written_again(tmp_path):
    """smollm2_gpu.sh `prompts` writes the held-out set with this command; every row finds
    its prompt, and only the Kovac Textiles row changes verdict (DA and all blocks)."""
    prompts = tmp_path / "held-out.jsonl"
    with prompts.open("w") as f:
        subprocess.run([sys.executable, "-m", "da_lab.training.eval.eval_prompts", "--n", "500",
                        "--split", "heldout", "--set", "held-out-domains", "--by-domain"],
                       stdout=f, check=True, cwd=ROOT)
    src = ROOT / "bench/results/eval-smollm2-h100-2026-12-06-held-out-domains.json.gz"
    out = tmp_path / "rescored.json"
    r = subprocess.run([sys.executable, "-m", "da_lab.training.eval.eval_rescore", str(src),
                        str(prompts), "--out", str(out)], capture_output=True, text=True,
                       check=True, cwd=ROOT)
    lines = r.stdout.splitlines()
    assert [x.split(":")[2].split()[0] for x in lines[:2]] == ["391", "391"], r.stdout
    assert "no matching prompt" not in r.stdout
    assert "da_answer_accuracy: 0.868 -> 0.870" in lines
    new, old = load_document(out), load_document(src)
    assert new["n"] == old["n"] == 500
    assert sum(r["correct"] for r in new["rows"]) == sum(r["correct"] for r in old["rows"]) + 1
