// Diagram 4's chart: blocks read per step (a step line) and blocks in the context (dashed), for
// every step of the request up to the step on screen. Drawn as two SVG paths; a step back only
// draws fewer points.

import { s, SMALL } from "./dom.js";

export class Chart {
  constructor(parent, { width, height = 150 }) {
    this.svg = s("svg", { class: "da-svg da-chart", width, height, "data-da-part": "chart" }, parent);
    Object.assign(this, { width, height, m: { l: 46, r: 12, t: 22, b: 30 } });
  }
  resize(width) { this.width = width; this.svg.setAttribute("width", width); }
  // series: steps[], read[], total[] (the request's, all steps so far); k: how many to draw
  draw(steps, read, total, k) {
    const svg = this.svg, { l, r, t, b } = this.m, W = this.width - l - r, H = this.height - t - b;
    svg.replaceChildren();
    s("text", { x: 4, y: 14, "font-size": 12, "font-weight": "bold", text: "blocks read per step" }, svg);
    s("text", { x: 150, y: 14, "font-size": SMALL, fill: "#1f6fb4", text: "—●— blocks read" }, svg);
    s("text", { x: 262, y: 14, "font-size": SMALL, fill: "#777",
                text: "- - - blocks in the context, up to the step on screen" }, svg);
    if (!k) return;
    const x0 = steps[0], x1 = Math.max(steps[k - 1], x0 + 1);
    let top = 0;
    for (let j = 0; j < k; j++) top = Math.max(top, total[j], read[j]);
    const y1 = 8 * Math.ceil((top * 1.1 + 1) / 8);
    const X = (v) => l + ((v - x0) / (x1 - x0)) * W, Y = (v) => t + H - (v / y1) * H;
    const axis = s("g", { "font-size": SMALL, fill: "#444" }, svg);
    for (const v of ticks(0, y1, 4)) {
      s("line", { x1: l, x2: l + W, y1: Y(v), y2: Y(v), stroke: "#eee" }, axis);
      s("text", { x: l - 6, y: Y(v) + 4, "text-anchor": "end", text: String(v) }, axis);
    }
    for (const v of ticks(x0, x1, 6)) {
      s("text", { x: X(v), y: t + H + 16, "text-anchor": "middle", text: String(v) }, axis);
    }
    s("text", { x: l + W / 2, y: this.height - 2, "text-anchor": "middle", text: "engine step" }, axis);
    s("line", { x1: l, x2: l + W, y1: t + H, y2: t + H, stroke: "#999" }, axis);
    const path = (ys) => {
      let d = `M ${X(steps[0])} ${Y(ys[0])}`;
      for (let j = 1; j < k; j++) d += ` H ${X(steps[j])} V ${Y(ys[j])}`;
      return d;
    };
    s("path", { d: path(total), fill: "none", stroke: "#888", "stroke-dasharray": "5 4",
                "stroke-width": 1.5 }, svg);
    s("path", { d: path(read), fill: "none", stroke: "#1f6fb4", "stroke-width": 2,
                "data-series": "read", "data-y": read.slice(0, k).join(","),
                "data-x": steps.slice(0, k).join(",") }, svg);
    if (k <= 120) {
      const dots = s("g", { fill: "#1f6fb4" }, svg);
      for (let j = 0; j < k; j++) s("circle", { cx: X(steps[j]), cy: Y(read[j]), r: 2.5 }, dots);
    }
  }
}

function ticks(a, b, n) {
  const span = b - a, raw = span / n, mag = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
  const stepv = [1, 2, 5, 10].map((m) => m * mag).find((x) => x >= raw) || mag * 10;
  const out = [];
  for (let v = Math.ceil(a / stepv) * stepv; v <= b + 1e-9; v += stepv) out.push(Math.round(v));
  return [...new Set(out)];
}
