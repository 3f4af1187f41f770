"""What a whole-figure redraw of notebook 04's figures costs in plotly.js, and which of their
parts it is spent on (issue 15, item 6: the steps whose rows change are the long tasks of Play).

    BROWSER_PATH=/usr/bin/chromium .venv/bin/python bench/replot_cost.py \
        [--traces seed_cpu h200_8b] [--step 20] [--out FILE.json]

The pair (DA hook + blocks) is built on a trace in JupyterLab + headless Chromium and shown at
one step. Each figure on the page is then copied (its data and layout as plotly.js holds them)
into a scratch div, whole and with one kind of part left out, and given a data edit (restyle
of trace 0's x: plotly.js recalculates and redraws the whole figure for any data edit); the
median of 7 such edits is reported, in ms, per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import widgets_browser as wb  # noqa: E402

MEASURE = r"""async () => {
  const P = window.Plotly;
  const out = [];
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const data = JSON.parse(JSON.stringify(gd.data));
    const layout = JSON.parse(JSON.stringify(gd.layout));
    const hide = (pred) => data.map((t) => (pred(t) ? {...t, visible: false} : t));
    const variants = {
      whole: [data, layout],
      no_shapes: [data, {...layout, shapes: []}],
      no_shape_labels: [data, {...layout,
                               shapes: (layout.shapes || []).map((s) => ({...s, label: {}}))}],
      no_text_traces: [hide((t) => t.mode === 'text'), layout],
      no_heatmaps: [hide((t) => t.type === 'heatmap'), layout],
      no_template: [data, {...layout, template: {}}],
    };
    const row = {traces: data.map((t) => [t.type, t.mode || '', (t.x || t.z || []).length]),
                 shapes: (layout.shapes || []).length, height: layout.height};
    for (const [name, [d, l]] of Object.entries(variants)) {
      const div = document.createElement('div');
      document.body.appendChild(div);
      await P.newPlot(div, d, l);
      const ms = [];
      for (let r = 0; r < 7; r++) {
        const t0 = performance.now();
        await P.restyle(div, {x: [d[0].x]}, [0]);
        ms.push(performance.now() - t0);
      }
      ms.sort((a, b) => a - b);
      row[name] = +ms[3].toFixed(1);
      P.purge(div);
      div.remove();
    }
    out.push(row);
  }
  return out;
}"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", nargs="*", default=["seed_cpu", "h200_8b"])
    ap.add_argument("--step", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with wb.chromium_page() as (page, _cdp, lab):
        wb.open_notebook(page, lab)
        for trace in wb.traces_named(args.traces):
            out = page.evaluate(wb.KERNEL_EXEC, f"""
from da_lab_widgets import BlocksDiagram, DAHookDiagram, Highlight, Player, TraceSource
box.children = []
src = TraceSource({str(trace)!r}); hl = Highlight()
player = Player(src, [DAHookDiagram(src.header, hl), BlocksDiagram(src.header, hl)])
box.children = [player.widget]
player.show(min({args.step}, len(src.records) - 1))""")
            if "ERROR" in out:
                raise RuntimeError(out)
            page.wait_for_timeout(3000)       # the figures draw
            for name, r in zip(("da_hook row", "da_hook chart", "blocks"),
                               page.evaluate(MEASURE), strict=True):
                r.update(trace=trace.name, figure=name)
                print(json.dumps(r), flush=True)
                rows.append(r)
    if args.out:
        args.out.write_text(json.dumps({
            "command": "python " + " ".join(sys.argv), "load_avg_1m": os.getloadavg()[0],
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "rows": rows},
            indent=1) + "\n")


if __name__ == "__main__":
    main()
