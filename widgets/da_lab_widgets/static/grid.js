// Panel (d) of diagram 2: the physical KV cache, one cell per block, coloured by owner (free,
// free but prefix-cached, each request its own colour). Small caches get their ids written in
// the cells; large ones are drawn as runs of alike cells per grid row, and hover names a cell.

import { animate, s, SMALL } from "./dom.js";
import { CACHED, FLASH, FREE, ownerColor, SHARED } from "./look.js";

export const LABELLED = 256;     // a cache this small gets its block ids written in the cells

export class Grid {
  // shared: a bar under each block owned by several requests (one block, several rows)
  constructor(parent, run, { x, y, width, shared = false }) {
    this.run = run;
    this.shared = shared;
    const n = Math.max(1, run.numBlocks);
    this.n = n;
    this.cols = Math.ceil(Math.sqrt(n));
    this.rows = Math.ceil(n / this.cols);
    this.labelled = n <= LABELLED;
    this.cell = this.labelled ? 27 : Math.max(6, Math.min(27, Math.floor(width / this.cols)));
    Object.assign(this, { x, y });
    this.width = this.cols * this.cell;
    this.height = this.rows * this.cell;
    this.g = s("g", { class: "da-grid" }, parent);
    this.cellsG = s("g", {}, this.g);
    this.marksG = s("g", { "pointer-events": "none" }, this.g);
    this.colors = new Array(n).fill(FREE);
    this.at = null;
  }
  xy(p) { const r = Math.floor(p / this.cols); return [this.x + (p % this.cols) * this.cell, this.y + r * this.cell]; }
  cellAt(clientX, clientY) {
    const box = this.g.ownerSVGElement.getBoundingClientRect();
    const c = Math.floor((clientX - box.left - this.x) / this.cell);
    const r = Math.floor((clientY - box.top - this.y) / this.cell);
    if (c < 0 || c >= this.cols || r < 0 || r >= this.rows) return null;
    const p = r * this.cols + c;
    return p < this.n ? p : null;
  }
  // the map after step i; `fresh`: blocks given an owner this step (they flash)
  draw(i, dt, fresh) {
    const kv = this.run.kvAt(i), cols = this.cols, c = this.cell, gap = this.labelled ? 2 : 0;
    this.kv = kv;
    this.owners = [];
    for (let p = 0; p < this.n; p++) {
      const o = kv.sets[kv.owners[p]] || [];
      for (const x of o) if (!this.owners.includes(x)) this.owners.push(x);
      this.colors[p] = o.length ? ownerColor(this.run, o[0]) : kv.cached[p] ? CACHED : FREE;
    }
    this.cellsG.replaceChildren();
    for (let r = 0; r < this.rows; r++) {
      let c0 = 0;
      while (c0 < cols && r * cols + c0 < this.n) {
        const p0 = r * cols + c0, col = this.colors[p0];
        let c1 = c0 + 1;
        if (!this.labelled) while (c1 < cols && r * cols + c1 < this.n && this.colors[r * cols + c1] === col) c1++;
        const [x, y] = this.xy(p0);
        const rect = s("rect", { x: x + gap / 2, y: y + gap / 2, width: (c1 - c0) * c - gap,
                                 height: c - gap, fill: col, "data-cells": `${p0},${p0 + c1 - c0}`,
                                 "data-fill": col }, this.cellsG);
        if (this.labelled) {
          s("text", { x: x + c / 2, y: y + c / 2 + 4, "text-anchor": "middle", "font-size": SMALL,
                      fill: "#333", "pointer-events": "none", text: String(p0) }, this.cellsG);
          if (dt && fresh && fresh.has(p0)) {
            animate(rect, [{ fill: FLASH }, { fill: col }], Math.max(dt, 300));
          }
        }
        c0 = c1;
      }
    }
    for (let p = 0; this.shared && p < this.n; p++) {
      if ((kv.sets[kv.owners[p]] || []).length < 2) continue;
      const [x, y] = this.xy(p);
      s("rect", { x: x + gap / 2, y: y + c - gap / 2 - 4, width: c - gap, height: 3, fill: SHARED,
                  "pointer-events": "none", "data-shared": p }, this.cellsG);
    }
    this.at = i;
  }
  describe(p) {
    const kv = this.kv;
    if (!kv) return "";
    const o = kv.sets[kv.owners[p]] || [];
    const many = o.length > 1 ? ` (one block, shared by ${o.length} requests)` : "";
    if (o.length) return `physical ${p}: ${o.join(", ")}${many}${kv.cached[p] ? " (in prefix cache)" : ""}`;
    return kv.cached[p] ? `physical ${p}: free, prefix-cached (reusable)` : `physical ${p}: free`;
  }
  // outlines around blocks `ps` (a set), one rect per run of them in a grid row
  mark(ps, color, cls = "") {
    const out = [], c = this.cell;
    const list = [...ps].filter((p) => p >= 0 && p < this.n).sort((a, b) => a - b);
    let k = 0;
    while (k < list.length) {
      let m = k + 1;
      while (m < list.length && list[m] === list[m - 1] + 1
             && Math.floor(list[m] / this.cols) === Math.floor(list[k] / this.cols)) m++;
      const [x, y] = this.xy(list[k]);
      out.push(s("rect", { x: x + 1, y: y + 1, width: (m - k) * c - 2, height: c - 2, fill: "none",
                           stroke: color, "stroke-width": 2.5, class: cls,
                           "data-mark": `${list[k]},${list[m - 1] + 1}` }, this.marksG));
      k = m;
    }
    return out;
  }
  clearMarks(cls) {
    for (const e of [...this.marksG.children]) if (!cls || e.classList.contains(cls)) e.remove();
  }
}
