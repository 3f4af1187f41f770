// A row of blocks drawn as RUNS: a maximal stretch of consecutive slots that look alike and
// whose physical ids (and logical ids) count up by one is one <rect>, so a 2,042-block row is a
// handful of rects, and every block is still known from its run (hover asks the row, not the
// rect). Where blocks are wide enough to label one by one, each block is its own run.
// When the row changes while playing, runs move from where their blocks were (the row shrinks
// and grows as a movement), and blocks new to the row land in it.

import { animate, s, SMALL, textWidth } from "./dom.js";

const LABEL_PX = 16;      // a block this wide gets its own run and label
const MIN_PX = 2;         // a run is drawn at least this wide

export class Strip {
  constructor(parent, { x, y, w, h, name }) {
    Object.assign(this, { x, y, w, h, name });
    this.g = s("g", { class: `da-strip da-strip-${name}`, "data-strip": name }, parent);
    this.runsG = s("g", {}, this.g);
    this.labelsG = s("g", { "pointer-events": "none" }, this.g);
    this.marksG = s("g", { "pointer-events": "none" }, this.g);
    this.blocks = [];
    this.slots = 1;
    this.pos = new Map();          // logical block -> x of its slot, as last drawn
  }
  cell() { return this.w / this.slots; }
  slotAt(clientX) {
    const box = this.g.ownerSVGElement.getBoundingClientRect();
    const j = Math.floor((clientX - box.left - this.x) / this.cell());
    return j >= 0 && j < this.blocks.length ? j : null;
  }
  // blocks: per slot {fill, ink, id (physical), lb (logical), tag (its label, default id),
  // partial (kept whole though it holds hidden tokens: drawn with a dashed edge)};
  // labels: "ids" (ranges of tags) or "regions" (region names)
  draw(blocks, slots, { dt = 0, labels = "ids", fresh = null, region = null } = {}) {
    const old = this.pos;
    this.blocks = blocks;
    this.slots = Math.max(1, slots);
    const c = this.cell(), each = c >= LABEL_PX;
    this.runsG.replaceChildren();
    this.labelsG.replaceChildren();
    this.pos = new Map();
    const runs = [];
    for (let j = 0; j < blocks.length; j++) {
      const b = blocks[j], r = runs[runs.length - 1];
      const p = j > 0 ? blocks[j - 1] : null;
      const same = r && !each && p.fill === b.fill && !p.partial === !b.partial
        && step(p.id, b.id) && step(p.lb, b.lb)
        && !!(fresh && fresh.has(p.id)) === !!(fresh && fresh.has(b.id));
      if (same) r.stop = j + 1;
      else runs.push({ start: j, stop: j + 1 });
      if (b.lb !== null && b.lb !== undefined) this.pos.set(b.lb, this.x + j * c);
    }
    for (const r of runs) {
      const b = blocks[r.start], last = blocks[r.stop - 1];
      const x = this.x + r.start * c, w = Math.max(MIN_PX, (r.stop - r.start) * c);
      const rect = s("rect", { x, y: this.y, width: w, height: this.h, fill: b.fill,
                               stroke: each ? "white" : null, "stroke-width": each ? 1 : null,
                               "data-run": `${r.start},${r.stop}`, "data-fill": b.fill,
                               "data-id": b.id ?? "", "data-lb": b.lb ?? "" }, this.runsG);
      if (b.partial) {
        // kept whole although it holds hidden tokens: a dashed edge says "read, partly masked"
        Object.assign(rect.dataset, { partial: "1" });
        rect.setAttribute("stroke", "#333");
        rect.setAttribute("stroke-width", "1.5");
        rect.setAttribute("stroke-dasharray", "3 2");
      }
      const label = labels === "regions" ? regionLabel(region, b.lb, last.lb)
        : idRange(b.tag ?? b.id, last.tag ?? last.id);
      const tw = label ? textWidth(label, SMALL) : 0;
      let text = null;
      if (label && tw + 4 <= w) {
        text = s("text", { x: x + w / 2, y: this.y + this.h / 2 + 4, "text-anchor": "middle",
                           "font-size": SMALL, fill: b.ink || "#111", text: label }, this.labelsG);
      }
      const from = b.lb !== null && b.lb !== undefined ? old.get(b.lb) : undefined;
      if (dt && from !== undefined && Math.abs(from - x) > 0.5) {
        const f = [{ transform: `translateX(${from - x}px)` }, { transform: "translateX(0)" }];
        animate(rect, f, dt);
        if (text) animate(text, f, dt);
      } else if (dt && fresh && fresh.has(b.id)) {
        const f = [{ transform: `translateY(${-this.h - 6}px)`, opacity: 0.2 },
                   { transform: "translateY(0)", opacity: 1 }];
        animate(rect, f, dt, { easing: "cubic-bezier(.3,1.4,.6,1)" });
        if (text) animate(text, f, dt);
      }
    }
    this.runs = runs;
  }
  // outlines around the slots `want(block)` picks, one per run of them; `cls` animates
  mark(want, color, cls = "", pad = 2) {
    const c = this.cell();
    let j = 0;
    const out = [];
    while (j < this.blocks.length) {
      if (!want(this.blocks[j])) { j++; continue; }
      let k = j;
      while (k < this.blocks.length && want(this.blocks[k])) k++;
      out.push(s("rect", { x: this.x + j * c - pad, y: this.y - pad,
                           width: Math.max(MIN_PX, (k - j) * c) + 2 * pad, height: this.h + 2 * pad,
                           fill: "none", stroke: color, "stroke-width": 2.5, rx: 2,
                           class: cls, "data-mark": `${j},${k}` }, this.marksG));
      j = k;
    }
    return out;
  }
  clearMarks(cls) {
    for (const e of [...this.marksG.children]) if (!cls || e.classList.contains(cls)) e.remove();
  }
}

function step(a, b) {
  if (a === null || a === undefined) return b === null || b === undefined;
  return b === a + 1;
}

function idRange(a, b) {
  if (a === null || a === undefined) return "";
  return a === b ? String(a) : `${a}–${b}`;
}

const SHORTS = { scaffold: "S", prompt: "P", tail: "Q", response: "R" };
function regionLabel(region, a, b) {
  if (!region || a === null || a === undefined) return "";
  const x = SHORTS[region(a)] || region(a), y = SHORTS[region(b)] || region(b);
  return x === y ? x : `${x}–${y}`;
}
