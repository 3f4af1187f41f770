"""Diagram 1 (skeleton), diagram 3 (metadata path), the export, and the skeleton's variant
buttons, which start real stock vLLM engines in subprocesses.

Every expected string is read from the shipped trace's header/records or from the engine's
own result, never written into the test: the test checks that the diagrams *show* what the run
recorded, read from the page that draws them (the exported page, in Chromium).
"""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from browser_lab import LAYOUT_JS
from da_lab_widgets.highlight import Highlight
from da_lab_widgets.skeleton import SkeletonDiagram
from da_lab_widgets.skeleton_answers import html_one_backend
from page_lab import open_page, write_page

from da_lab.engine.variants import introspect_variant, variant_cache
from da_lab.trace import load

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "traces" / "seed_cpu.jsonl.gz"
NAMES = ["1_skeleton", "2_blocks", "3_metadata_path", "4_da_hook", "blocks_read"]


@pytest.fixture(scope="module")
def trace():
    return load(SHIPPED)


@pytest.fixture(scope="module")
def page(browser, tmp_path_factory):
    """The seed trace's page at the width JupyterLab's notebook gives a cell at 1366 x 768
    with the file browser open (~934 px)."""
    p = open_page(browser, write_page(SHIPPED, tmp_path_factory.mktemp("p") / "run.html",
                                      eager=True), width=966, height=768)
    yield p
    assert p.errors == []
    p.close()


def _focus_step(trace) -> int:
    """The first step where the hook shortened a request (a FOCUS/LOCAL step)."""
    return next(i for i, r in enumerate(trace.records)
                if any(h.hooked and h.attn_seq_len < h.seq_len for h in r.requests))


# Diagram n's drawn text: a <text>'s lines (tspans with their own x) joined by spaces.
TEXT_JS = """(sel) => [...document.querySelectorAll(sel)].map((t) => [...t.children]
  .map((c, k) => (k && c.hasAttribute('x') ? ' ' : '') + c.textContent).join('')).join('\\n')"""


def _svg_text(page, n: int) -> str:
    return page.evaluate(TEXT_JS, f'[data-da-diagram="{n}"] svg text').replace("  ", " ")


# ---- diagram 1 -------------------------------------------------------------------------------

def test_skeleton_shows_the_injected_implementations(trace, page):
    sk = trace.header["skeleton"]
    page.evaluate("daLab.goto(0)")
    text = _svg_text(page, 1).replace("\n", " ")
    slots = sk["slots"]
    attn = [s for s in slots if s["slot"] == "attention"]
    assert attn
    for s in attn:
        assert f"backend {s['backend']}" in text and s["impl"] in text
    for s in slots:
        if s["slot"] in ("linear", "embedding"):
            assert s["class"] in text and s["linear_method"] in text
        if s["slot"] == "custom_op":
            assert f"{s['class']} → {s['dispatch']}" in text
    # Identical decoder layers collapse into one box that says how many it stands for, and
    # the caption says why the others were not merged.
    d = SkeletonDiagram(trace.header)
    vm = d.config(trace.header, trace.records)
    n = sk["config"]["num_layers"]
    assert len(vm["groups"]) < n
    assert any("× " in ln and "layers" in ln for g in vm["groups"] for ln in g["label"])
    assert "identical slots" in text
    caption = page.inner_text('[data-da-diagram="1"] .da-skeleton-caption')
    for diff in vm["differences"]:
        assert diff in caption
    # The skeleton's header facts are in the title.
    assert trace.header["provenance"]["vllm"] in page.inner_text('[data-da-diagram="1"] .da-title')


def test_skeleton_marks_the_steps_attention_call(trace, page):
    for i in (0, _focus_step(trace)):
        rec = trace.records[i]
        md = rec.metadata
        page.evaluate("(i) => daLab.goto(i)", i)
        note = page.evaluate(TEXT_JS, '[data-da-diagram="1"] [data-da-part=note]')
        n_tok = md.query_start_loc[-1] - md.query_start_loc[0]
        assert f"step {rec.step}: attention call" in note
        assert f"backend {md.backend}" in note
        assert f"{n_tok} query token" in note
        assert str(md.seq_lens.tolist()).replace(" ", "") in note.replace(" ", "")
        widths = page.evaluate("[...document.querySelectorAll('[data-attention]')]"
                               ".map(r => r.getAttribute('stroke-width'))")
        assert widths and set(widths) == {"3"}


def test_one_backend_is_computed_from_the_skeleton(trace):
    sk = trace.header["skeleton"]
    backend = next(s["backend"] for s in sk["slots"] if s["slot"] == "attention")
    n = sum(s["slot"] == "attention" for s in sk["slots"])
    ans = html_one_backend(sk)
    assert ans.startswith("<p><b>Yes:</b>") and f"all {n} attention slots" in ans
    assert backend in ans
    # The same question on a skeleton where one layer has another backend: the answer flips.
    other = json.loads(json.dumps(sk))
    next(s for s in other["slots"] if s["slot"] == "attention")["backend"] = "OTHER_BACKEND"
    ans2 = html_one_backend(other)
    assert ans2.startswith("<p><b>No:</b>") and "OTHER_BACKEND" in ans2


# Every slot's text inside its box, at the page's own font (boxes are <rect>s, their text the
# <text> after them in the same <g>).
INSIDE_JS = """() => [...document.querySelectorAll('[data-da-diagram="1"] g.da-slot')].map((g) => {
  const r = g.querySelector('rect').getBoundingClientRect(),
        t = g.querySelector('text').getBoundingClientRect();
  return t.left >= r.left - 0.5 && t.right <= r.right + 0.5 && t.top >= r.top - 0.5
    && t.bottom <= r.bottom + 0.5 ? null : g.textContent; }).filter((x) => x)"""


@pytest.mark.parametrize("name", ["seed_cpu.jsonl.gz", "h200_8b_64k.jsonl.gz"])
def test_diagrams_1_and_3_fit_the_notebook_at_11_px(name, browser, tmp_path):
    """The drawing fits the notebook at 1366 x 768 with the file browser open (~934 px for a
    cell): nothing reaches past its box, every text 11 px or more, every slot's text inside
    its box."""
    p = open_page(browser, write_page(ROOT / "traces" / name, tmp_path / "run.html",
                                      eager=True), width=966)
    p.evaluate("(i) => daLab.goto(i)", len(load(ROOT / "traces" / name).records) - 1)
    for n in (1, 3):
        (m,) = p.evaluate(LAYOUT_JS, f'[data-da-diagram="{n}"]')
        assert m["cell_width"] <= 940 and m["n_overflow"] == 0, m
        assert m["min_font"] >= 11, m
    assert p.evaluate(INSIDE_JS) == []
    assert p.errors == []
    p.close()


def test_wrap_label_keeps_every_word_and_tag():
    from da_lab_widgets.skeleton_view import wrap_label

    label = ("<b>rotary_emb</b><br>RotaryEmbedding → forward_native [native torch]<br>"
             "<i>one instance, shared by all layers</i>")
    out = wrap_label(label, 20)
    lines = out.split("<br>")
    assert all(len(x.replace("<b>", "").replace("</b>", "").replace("<i>", "")
                   .replace("</i>", "")) <= 20 for x in lines), lines
    assert out.replace("<br>", " ").replace("</i> <i>", " ") == label.replace("<br>", " ")
    assert lines[1:4] == ["RotaryEmbedding", "→ forward_native", "[native torch]"]
    assert wrap_label("short", 20) == "short"


# ---- diagram 3 -------------------------------------------------------------------------------

def test_metadata_path_packet_carries_the_steps_values(trace, page):
    i = _focus_step(trace)
    rec = trace.records[i]
    h = next(h for h in rec.requests if h.hooked)
    impl = next(s["impl"] for s in trace.header["skeleton"]["slots"] if s["slot"] == "attention")
    d3 = '[data-da-diagram="3"]'
    # The last box is the impl the skeleton names.
    assert page.get_attribute(f"{d3} [data-stage=impl]", "data-stage") == "impl"
    assert impl in _svg_text(page, 3).replace("\n", "")
    # Shown still, the packet sits on the DA hook's box: there the full and the kernel's
    # values differ.
    page.evaluate("(i) => daLab.goto(i)", i)
    assert page.get_attribute(d3, "data-da-packet") == "hook"
    card = page.inner_text(f"{d3} [data-da-part=card]")
    assert f"seq_len {h.seq_len} → {h.attn_seq_len}" in card
    values = page.inner_text(f"{d3} [data-da-part=values]")
    full = rec.metadata.seq_lens.tolist()
    full[h.row] = h.seq_len
    assert f"seq_lens full {full}".replace(" ", "") in values.replace(" ", "")
    assert f"impl {impl}" in values
    assert f"blocks staged {len(h.staged_row)}" in values
    assert f"blocks read {h.blocks_read}" in values
    # box ▶ / ◀ box move the packet within the step, wrapping around; the label says where.
    stages = page.evaluate(f"[...document.querySelectorAll('{d3} [data-stage]')].length")
    nxt = page.locator(f"{d3} button", has_text="box ▶")
    for _ in range(stages - 3):
        nxt.click()
    assert page.get_attribute(d3, "data-da-packet") == "impl"
    card = page.inner_text(f"{d3} [data-da-part=card]")
    assert impl in card and f"reads {h.blocks_read} of {len(h.staged_row)} blocks" in card
    assert f"box {stages} of {stages}" in page.inner_text(d3)
    nxt.click()
    assert page.get_attribute(d3, "data-da-packet") == "scheduler"
    page.locator(f"{d3} button", has_text="◀ box").click()
    assert page.get_attribute(d3, "data-da-packet") == "impl"
    # The next step keeps the box the learner chose; the values are the new step's.
    page.evaluate("(i) => daLab.goto(i)", i + 1)
    assert page.get_attribute(d3, "data-da-packet") == "impl"
    assert f"step {trace.records[i + 1].step} ·" in page.inner_text(f"{d3} [data-da-part=card]")
    page.locator(f"{d3} [data-stage=hook]").click()
    assert page.get_attribute(d3, "data-da-packet") == "hook"
    # The hovered block: a staged block the kernel skips is reported as hidden.
    page.evaluate("(i) => daLab.goto(i)", i)
    hidden = next(b for b in h.staged_row.tolist() if b not in h.read_row.tolist())
    hub = "[...document.__daLabPage.hubs.values()][0]"
    page.evaluate(f"(b) => {hub}.set(b, 'test')", hidden)
    assert "HIDDEN from the kernel" in page.inner_text(f"{d3} .da-hl-note")
    page.evaluate(f"(b) => {hub}.set(b, 'test')", int(h.read_row[0]))
    assert "read by the kernel" in page.inner_text(f"{d3} .da-hl-note")
    page.evaluate(f"{hub}.set(null)")


# ---- export ----------------------------------------------------------------------------------

def test_export_trace_writes_every_diagram_without_vllm(tmp_path):
    # In a subprocess where vllm and torch cannot be imported: export only reads the trace.
    code = ("import sys; sys.modules['vllm'] = None; sys.modules['torch'] = None\n"
            "from da_lab_widgets.export import main_export\n"
            f"sys.exit(main_export([{str(SHIPPED)!r}, '--out', {str(tmp_path)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    printed = sorted(Path(x) for x in p.stdout.split())
    expected = sorted(tmp_path / f"{n}.{ext}" for n in NAMES for ext in ("png", "svg"))
    assert printed == expected
    assert sorted(tmp_path.iterdir()) == expected
    for n in NAMES:
        png = (tmp_path / f"{n}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000, n
        root = ET.parse(tmp_path / f"{n}.svg").getroot()
        assert root.tag.endswith("svg"), n


def test_export_cli_refuses_a_missing_trace(tmp_path, capsys):
    from da_lab_widgets.export import main_export

    assert main_export([str(tmp_path / "nope.jsonl.gz"), "--out", str(tmp_path / "o")]) == 2
    assert "no such file" in capsys.readouterr().err


# ---- the variant buttons: real stock vLLM engines ----------------------------------------------

@pytest.fixture
def variant_home(tmp_path, monkeypatch):
    """A fresh lab home for the variant cache, so the engine really runs."""
    monkeypatch.setenv("DA_LAB_HOME", str(tmp_path))
    return tmp_path


def test_sliding_window_variant_runs_a_real_engine(tiny_model, variant_home, trace, page):
    res = introspect_variant(tiny_model, "sliding_window", refresh=True)
    assert res["ok"] and not res["cached"], res.get("error")
    sk = res["skeleton"]
    attn = [s for s in sk["slots"] if s["slot"] == "attention"]
    assert len(attn) == sk["config"]["num_layers"]
    # What vLLM reports on every attention slot of the loaded Mistral-config model.
    assert {s["sliding_window"] for s in attn} == {64}
    assert sk["config"]["sliding_window"] == 64 and sk["model_class"] == "MistralForCausalLM"
    assert sk["kv_cache_specs"] == ["SlidingWindowSpec"]
    assert len(res["generated"]) == 4
    # The DA hook would not take it: the lab's own precheck says so.
    assert res["da_hook"].startswith("refused:") and "sliding window" in res["da_hook"]
    # Cached on disk: the button's second press is instant and says it is a cached result.
    assert variant_cache("sliding_window").exists()
    again = introspect_variant(tiny_model, "sliding_window")
    assert again["cached"] and again["skeleton"] == sk
    d = SkeletonDiagram(trace.header, Highlight(), model_path=tiny_model)
    d.answer_variant("sliding_window")
    assert "sliding window 64" in d.answer and "SlidingWindowSpec" in d.answer
    assert "cached result" in d.status and d.panel() == {"status": d.status, "answer": d.answer,
                                                         "view": d.view}
    # the variant's skeleton is drawn in place of the run's; "own" goes back
    own = SkeletonDiagram.drawing(trace.header["skeleton"], trace.header["provenance"])
    assert d.view["title"][0][0] == "sliding-window model" and d.view["rows"] != own["rows"]
    assert "drawn above" in d.status
    d.on_message("variant", {"kind": "own"})
    assert d.view is None and d.panel()["view"] is None
    # in the page: the answer redraws diagram 1 from the variant's skeleton, "own" draws the run's
    d1 = '[data-da-diagram="1"]'
    before = _svg_text(page, 1)
    d.answer_variant("sliding_window")
    page.evaluate("(p) => daLab.session.message({type: 'state', panel: p})", d.panel())
    assert page.get_attribute(d1, "data-da-drawing") == "variant"
    assert "sliding-window model" in page.inner_text(f"{d1} .da-title")
    assert _svg_text(page, 1) != before and "window 64" in _svg_text(page, 1)
    assert page.is_visible(f"{d1} [data-da-variant=own]")
    page.evaluate("(p) => daLab.session.message({type: 'state', panel: p})",
                  {"status": "", "answer": "", "view": None})
    assert page.get_attribute(d1, "data-da-drawing") == "run" and _svg_text(page, 1) == before


def test_quantized_variant_runs_a_real_engine(tiny_model, variant_home, trace):
    res = introspect_variant(tiny_model, "quantized", refresh=True)
    first, last = res["attempts"][0], res["attempts"][-1]
    # vLLM refuses online fp8 in the lab's float32 — its own message, kept verbatim...
    assert not first["ok"] and first["engine_args"]["dtype"] == "float32"
    assert ("torch.float32 is not supported for quantization method fp8_per_channel"
            in first["error"])
    # ...and loads it in bfloat16: every linear layer gets the online FP8 LinearMethod, with
    # weights stored in float8 and a CPU scaled-mm kernel; embedding and LM head stay as they were.
    assert res["ok"] and last["ok"] and last["engine_args"]["dtype"] == "bfloat16"
    sk = res["skeleton"]
    assert sk["config"]["quantization"] == "fp8_per_channel"
    assert {s["linear_method"] for s in sk["slots"] if s["slot"] == "linear"} == \
        {"Fp8PtpcOnlineLinearMethod"}
    assert {s["linear_method"] for s in sk["slots"] if s["slot"] == "embedding"} == \
        {"UnquantizedEmbeddingMethod"}
    fp8 = next(k for k in res["linear_kernels"]
               if k["linear_method"] == "Fp8PtpcOnlineLinearMethod")
    assert fp8["weight_dtype"].startswith("float8") and fp8["kernels"]
    assert len(res["generated"]) == 4 and res["da_hook"] == "accepted"
    d = SkeletonDiagram(trace.header, Highlight(), model_path=tiny_model)
    d.answer_variant("quantized")
    assert "Fp8PtpcOnlineLinearMethod" in d.answer
    assert "float32 is not supported" in d.answer
    # the refused attempt in one line, the whole error folded under it
    assert "<details><summary>the whole error</summary>" in d.answer
    assert "ValidationError" not in d.answer.split("<details>")[0]


def test_cli_export_writes_every_diagram(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "da_lab.cli", "export",
                          "traces/seed_cpu.jsonl.gz", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=600,
                         cwd=str(Path(__file__).resolve().parents[1]))
    assert out.returncode == 0, out.stderr[-2000:]
    names = sorted(p.name for p in (tmp_path / "x").iterdir())
    assert len(names) == 10 and "4_da_hook.png" in names and "blocks_read.svg" in names


def test_diagram_2_draws_host_and_device_memory_and_the_commit(page, browser, tmp_path):
    """CPU run: one memory, commit() copies nothing; an H200 run: host RAM above, GPU HBM
    below, commit() the copy between them."""
    d2 = '[data-da-diagram="2"]'
    page.evaluate("daLab.goto(1)")
    assert page.locator(f"{d2} rect[data-memory=host]").count() == 1
    assert page.locator(f"{d2} rect[data-memory=device]").count() == 1
    assert "commit() copies nothing" in page.text_content(f"{d2} text[data-memory=note]")
    gpu = open_page(browser, write_page(ROOT / "traces" / "h200_tiny_seed.jsonl.gz",
                                        tmp_path / "gpu.html", eager=True), width=966,
                    height=768)
    gpu.evaluate("daLab.goto(1)")
    note = gpu.text_content(f"{d2} text[data-memory=note]")
    assert "host → device" in note and "GPU HBM" in note
    fills = gpu.evaluate(f"[...document.querySelectorAll('{d2} rect[data-memory]')]"
                         ".map(r => r.getAttribute('fill'))")
    assert len(set(fills)) == 2          # two memories, drawn apart
    assert gpu.errors == []
    gpu.close()

