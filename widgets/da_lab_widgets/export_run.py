"""The whole run as one HTML page: every diagram, one plotly frame per step, one player.

Each figure is drawn by the same diagram code the notebooks use, once per step of the trace
(every number on the page comes from the trace), and kept as frames: the first step's figure
plus, per step, the parts of its traces and layout that differ from it. One slider and
one ▶ move every figure together (Plotly.react with the step's figure: a frame applied on top
of another step's would keep that step's leftovers). plotly.js is embedded once, so the page
opens offline.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 12px; }}
#da-player {{ position: sticky; top: 0; background: white; z-index: 10; padding: 6px 0;
             display: flex; gap: 10px; align-items: center; border-bottom: 1px solid #ddd; }}
#da-player input {{ width: 420px; }}
#da-step {{ min-width: 7em; font-weight: bold; }}
.da-figure {{ margin: 14px 0; }}
</style>
<script>{plotly}</script></head>
<body>
<h2>{title}</h2>
<p>{subtitle}</p>
<div id="da-player"><button id="da-play" title="play / pause">▶</button>
<input id="da-slider" type="range" min="0" max="{last}" value="0" step="1">
<span id="da-step"></span>
<label>ms / step <input id="da-speed" type="number" min="50" max="5000" step="50"
 value="400" style="width:5em"></label></div>
{divs}
<script>
const FIGS = {figs};
const STEPS = {steps};
const slider = document.getElementById("da-slider"), label = document.getElementById("da-step");
const play = document.getElementById("da-play"), speed = document.getElementById("da-speed");
let timer = null;
function frameOf(f, k) {{
  const fr = f.frames[k];
  const data = f.data.map((t, j) => Object.assign({{}}, t, (fr.data && fr.data[j]) || {{}}));
  return [data, Object.assign({{}}, f.layout, fr.layout || {{}})];
}}
function show(k) {{
  for (const f of FIGS) {{
    const [data, layout] = frameOf(f, k);
    Plotly.react(f.id, data, layout, {{displaylogo: false}});
  }}
  slider.value = k;
  label.textContent = "step " + STEPS[k];
  document.body.dataset.step = STEPS[k];
}}
function stop() {{ clearInterval(timer); timer = null; play.textContent = "▶"; }}
play.onclick = () => {{
  if (timer) return stop();
  play.textContent = "⏸";
  timer = setInterval(() => {{
    const k = Number(slider.value) + 1;
    if (k >= STEPS.length) return stop();
    show(k);
  }}, Math.max(50, Number(speed.value) || 400));
}};
slider.oninput = () => show(Number(slider.value));
show(0);
</script></body></html>
"""


def _snapshot(fig) -> dict:
    from plotly.io.json import to_json_plotly

    return json.loads(to_json_plotly(fig.to_plotly_json()))


def _diff(new: dict, old: dict) -> dict | None:
    """The top-level keys of `new` that differ from `old` (a key `new` lacks: None)."""
    d = {k: v for k, v in new.items() if old.get(k) != v}
    d.update({k: None for k in old if k not in new})
    return d or None


def _frames(snaps: list[dict]) -> dict:
    """The first snapshot, and per snapshot what differs from it: per trace and for the
    layout, the top-level keys that changed (a trace's colours, not its fixed positions)."""
    base = snaps[0]
    frames = []
    for s in snaps:
        data = [_diff(t, base["data"][j]) if j < len(base["data"]) else t
                for j, t in enumerate(s["data"])]
        frames.append({"data": data if any(data) else None,
                       "layout": _diff(s["layout"], base["layout"])})
    return {"data": base["data"], "layout": base["layout"], "frames": frames}


def write_run(shown, header: dict, steps: list[int], path: str | Path,
              title: str = "") -> Path:
    """One HTML page playing every diagram over `shown`: (index, {name: figure}) per step, the
    figures drawn at that step (export.diagrams_at); `steps` are their engine step numbers."""
    from plotly.offline import get_plotlyjs

    snaps: dict[str, list[dict]] = {}
    for _i, figures in shown:
        for name, fig in figures.items():
            snaps.setdefault(name, []).append(_snapshot(fig))
    figs = [{"id": f"da-fig-{name}", **_frames(s)} for name, s in snaps.items()]
    prov = header.get("provenance") or {}
    page = _PAGE.format(
        title=html.escape(title or "da_lab run"),
        subtitle=html.escape(f"{prov.get('vllm', '?')} on {prov.get('device', '?')}, model "
                             f"{prov.get('model_name') or prov.get('model', '?')}: steps "
                             f"{steps[0]}–{steps[-1]}, every value from the trace"),
        plotly=get_plotlyjs(), last=len(steps) - 1,
        divs="\n".join(f'<div class="da-figure" id="{f["id"]}"></div>' for f in figs),
        figs=json.dumps(figs, separators=(",", ":")).replace("</", "<\\/"),
        steps=json.dumps(steps))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    return out
