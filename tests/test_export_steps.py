"""`da-lab export` at a chosen step, over a range of steps, and as the page that plays the run;
`da-lab replay` into a pipe whose reader has gone. Expected values are read from the shipped
trace."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from da_lab_widgets.export import NAMES, step_indices

from da_lab.trace import load

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "seed_cpu.jsonl.gz"
CHROMIUM = os.environ.get("BROWSER_PATH", "/usr/bin/chromium")


@pytest.fixture(scope="module")
def trace():
    return load(SHIPPED)


def cli(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "da_lab.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def _focus(trace) -> int:
    """The first step where the hook shortened a request: its pictures differ from step 0's."""
    return next(r.step for r in trace.records
                if any(h.hooked and h.attn_seq_len < h.seq_len for h in r.requests))


def _svg_text(path: Path) -> str:
    return re.sub(r"<[^>]+>", "", path.read_text())


def test_step_indices_pick_steps_and_refuse_missing_ones(trace):
    steps = [r.step for r in trace.records]
    assert step_indices(trace.records) == [len(steps) - 1]
    assert step_indices(trace.records, step=steps[3]) == [3]
    assert step_indices(trace.records, steps="2:4") == [2, 3, 4]
    assert step_indices(trace.records, steps=f"{steps[-2]}:") == [len(steps) - 2,
                                                                 len(steps) - 1]
    assert step_indices(trace.records, steps=":1") == [0, 1]
    for bad, needle in [({"step": 10**6}, "no such step"), ({"steps": "5:2"}, "A <= B"),
                        ({"steps": "x:3"}, "whole numbers"), ({"steps": "7"}, "A:B"),
                        ({"steps": f"{10**6}:{10**7}"}, "no step")]:
        with pytest.raises(ValueError, match=needle):
            step_indices(trace.records, **bad)


def test_export_at_steps_draws_each_steps_values(trace, tmp_path):
    focus = _focus(trace)
    first = focus - 1           # two steps: before and after the hook first shortened a row
    out = cli("export", str(SHIPPED), "--out", str(tmp_path), "--steps", f"{first}:{focus}",
              "--animate")
    assert out.returncode == 0, out.stderr[-3000:]
    dirs = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert dirs == [f"step_{s:04d}" for s in range(first, focus + 1)]
    for d in dirs:
        assert sorted(p.name for p in (tmp_path / d).iterdir()) == sorted(
            f"{n}.{ext}" for n in NAMES for ext in ("png", "svg"))
    # Each step's pictures carry that step's numbers: diagram 1's note, diagram 3's card.
    for s in (first, focus):
        rec = next(r for r in trace.records if r.step == s)
        skel = _svg_text(tmp_path / f"step_{s:04d}" / "1_skeleton.svg")
        assert f"step {s}: attention call" in skel
        path = _svg_text(tmp_path / f"step_{s:04d}" / "3_metadata_path.svg")
        h = next(h for h in rec.requests if h.hooked)
        assert f"seq_len {h.seq_len} → {h.attn_seq_len}" in path
    a = (tmp_path / f"step_{first:04d}" / "4_da_hook.svg").read_bytes()
    b = (tmp_path / f"step_{focus:04d}" / "4_da_hook.svg").read_bytes()
    assert a != b
    printed = [Path(x) for x in out.stdout.split()]
    assert printed[-1] == tmp_path / "run.html" and all(p.exists() for p in printed)
    _check_run_page(trace, tmp_path / "run.html", list(range(first, focus + 1)))


def _check_run_page(trace, page_path: Path, steps: list[int]):
    """The page --animate wrote (the player, the whole trace), opened offline in Chromium: the
    slider moves every diagram, ▶ plays to the end."""
    from page_lab import chromium, open_page

    text = page_path.read_text()
    assert '<script src="http' not in text
    with chromium() as browser:
        page = open_page(browser, page_path, height=4000)
        n = len(trace.records)
        assert page.evaluate("document.querySelectorAll('[data-da-diagram]').length") == 4
        for s in (steps[-1], steps[0]):
            k = [r.step for r in trace.records].index(s)
            page.evaluate(f"(() => {{ const e = document.querySelector('[data-da-action=scrub]');"
                          f" e.value = {k}; e.dispatchEvent(new Event('input')); }})()")
            page.wait_for_function(f"[...document.querySelectorAll('[data-da-diagram]')]"
                                   f".every(e => e.dataset.daShows === '{k}')", timeout=30_000)
            assert f"step {s}: attention call" in page.text_content("[data-da-part=note]")
            read = page.get_attribute("[data-series=read]", "data-y").split(",")
            rec = trace.records[k]
            assert int(read[-1]) == next(h.blocks_read for h in rec.requests if h.hooked)
        page.click("[data-da-action=play]")
        page.wait_for_function(f"document.querySelector('[data-da-player]').dataset.daStep"
                               f" === '{n - 1}'", timeout=120_000)
        assert page.errors == [] and page.offline_requests == []


def test_export_refuses_a_step_the_trace_lacks(tmp_path):
    out = cli("export", str(SHIPPED), "--out", str(tmp_path), "--step", "999999")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("da-lab export: --step 999999")
    assert "steps 0–" in out.stderr
    both = cli("export", str(SHIPPED), "--out", str(tmp_path), "--step", "1", "--steps", "1:2")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("reader", ["head -n 3", "true"])
def test_replay_into_a_pipe_whose_reader_left(reader):
    """`| head` reads a little and leaves; `| true` leaves before anything was read, so the
    last write can fail when Python flushes on exit. Neither prints a traceback."""
    for _ in range(3):
        out = subprocess.run(f"{sys.executable} -m da_lab.cli replay {SHIPPED} | {reader}",
                             shell=True, capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert out.returncode == 0, out
        assert out.stderr == "", out.stderr


def test_export_says_what_it_needs_in_one_line(tmp_path):
    out = cli("export", str(SHIPPED))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "give --html FILE (the page) and/or --out DIR" in out.stderr
    out = cli("export", str(SHIPPED), "--html", str(tmp_path / "p.html"), "--step", "3")
    assert out.returncode == 2 and "--step, --steps and --animate go with --out" in out.stderr
    assert not any(tmp_path.iterdir())
