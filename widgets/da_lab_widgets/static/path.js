// Diagram 3 — the metadata path: how one step's attention metadata reaches the kernel.
// SchedulerOutput → BlockTable (append_row, commit) → DA hook at MetadataBuilder.build →
// MetadataBuilder → set_forward_context → Attention layer → the impl the run loaded. Each step
// the packet travels the boxes left to right carrying the step's real values (the card shows
// what it holds at the box it is on); paused, ◀ ▶ or a click on a box moves it. The dashed
// orange region is where DA acts, and the red mark is vLLM's real intercept point.

import { animate, h, lines, s, SMALL, wrap } from "./dom.js";
import { Diagram } from "./diagram.js";
import { HOOK, PACKET } from "./look.js";
import { blockNote, cardText, stepValues, valuesText } from "./pathtext.js";

const BOX_H = 88, WRITE = "#2a9d8f";

export class PathDiagram extends Diagram {
  constructor(ctx) {
    super(3, "da-metadata-path", ctx);
    const { cfg, hub } = this;
    this.stages = cfg.stages;
    this.frame = this.stages.findIndex((st) => st.key === "hook");
    this.hookAt = this.frame;
    const el = this.el;
    h("div", { class: "da-title", html: cfg.title }, el);
    this.svg = s("svg", { class: "da-svg" }, el);
    const stepper = h("div", { class: "da-buttons" }, el);
    h("button", { text: "◀ box", title: "packet: previous box", on: { click: () => this.move(-1) } }, stepper);
    h("button", { text: "box ▶", title: "packet: next box", on: { click: () => this.move(1) } }, stepper);
    this.where = h("span", { class: "da-caption" }, stepper);
    const cards = h("div", { class: "da-cards" }, el);
    this.card = h("div", { class: "da-card", "data-da-part": "card" }, cards);
    this.hlNote = h("div", { class: "da-caption da-hl-note" }, cards);
    this.values = h("div", { class: "da-values", "data-da-part": "values" }, el);
    this.offHub = hub.on(() => this._note());
  }

  layout(w) {
    const n = this.stages.length;
    this.cols = w >= 1500 ? n : 4;                 // a wide screen: all seven in one row
    const pitch = (w - 8) / this.cols, bw = Math.min(190, pitch - 72);   // room for the flows
    const rows = Math.ceil(n / this.cols), capLines = wrap(this.cfg.caption, w - 8, SMALL);
    const top = capLines.length * 14 + 46, gap = 64;
    this.pos = this.stages.map((_, k) => {
      const r = Math.floor(k / this.cols);
      let c = k % this.cols;
      if (r % 2) c = this.cols - 1 - c;
      return [4 + c * pitch + pitch / 2, top + r * (BOX_H + gap)];
    });
    this.bw = bw;
    const svg = this.svg;
    svg.replaceChildren();
    lines(svg, 4, 12, capLines, { "font-size": SMALL, fill: "#555" }, 14);
    defs(svg);
    const [hx, hy] = this.pos[this.hookAt], [bx] = this.pos[this.hookAt + 1];
    // where DA acts: the hook and the builder whose build() call it wraps
    s("rect", { x: Math.min(hx, bx) - bw / 2 - 10, y: hy - 30, width: Math.abs(bx - hx) + bw + 20,
                height: BOX_H + 40, rx: 10, fill: "#fff7f0", stroke: PACKET, "stroke-width": 2,
                "stroke-dasharray": "7 5", class: "da-region" }, svg);
    s("text", { x: Math.min(hx, bx) - bw / 2 - 4, y: hy - 16, "font-size": 12, fill: PACKET,
                "font-weight": "bold", text: "DA region" }, svg);
    this.stages.forEach((st, k) => this._box(st, k));
    for (let k = 0; k + 1 < n; k++) this._arrow(k);
    // vLLM's real intercept point: the builder's build() call
    const ix = (hx + bx) / 2, iy = hy + BOX_H / 2;
    s("circle", { cx: ix, cy: iy, r: 7, fill: HOOK, stroke: "white", "stroke-width": 2 }, svg);
    s("text", { x: ix, y: hy - 36, "text-anchor": "middle", "font-size": SMALL, fill: HOOK,
                text: "● vLLM's real intercept point: MetadataBuilder.build()" }, svg);
    this._write(svg);
    const bottom = Math.max(...this.pos.map(([, y]) => y)) + BOX_H + 44;
    svg.setAttribute("width", w);
    svg.setAttribute("height", bottom);
    this.packet = s("circle", { r: 10, fill: PACKET, stroke: "white", "stroke-width": 2.5,
                                class: "da-packet", "data-da-part": "packet" }, svg);
    this._place(this.frame);
  }

  _box(st, k) {
    const [x, y] = this.pos[k], bw = this.bw, hook = st.key === "hook";
    const g = s("g", { class: "da-stage", "data-stage": st.key, style: "cursor:pointer",
                       on: { click: () => this.moveTo(k) } }, this.svg);
    s("rect", { x: x - bw / 2, y, width: bw, height: BOX_H, rx: 4, fill: hook ? "#fde8e8" : "#e4e4e4",
                stroke: hook ? HOOK : "#8a8a8a", "stroke-width": hook ? 3 : 1.2,
                "stroke-dasharray": hook ? "6 4" : null }, g);
    const title = wrap(st.title, bw - 10, 12, "bold");
    lines(g, x, y + 17, title, { "text-anchor": "middle", "font-size": 12, "font-weight": "bold",
                                 fill: hook ? HOOK : "#222" });
    lines(g, x, y + 22 + 15 * title.length, wrap(st.sub, bw - 10, SMALL),
          { "text-anchor": "middle", "font-size": SMALL, fill: "#333" }, 14);
  }

  _arrow(k) {
    const [x, y] = this.pos[k], [x1, y1] = this.pos[k + 1], bw = this.bw, svg = this.svg;
    let d, lx, ly, anchor = "middle";
    if (y1 !== y) { d = `M ${x} ${y + BOX_H} L ${x1} ${y1 - 2}`; lx = x + 8; ly = (y + BOX_H + y1) / 2; anchor = "start"; }
    else {
      const dir = x1 > x ? 1 : -1;
      d = `M ${x + dir * bw / 2} ${y + BOX_H / 2} L ${x1 - dir * (bw / 2 + 2)} ${y1 + BOX_H / 2}`;
      lx = (x + x1) / 2; ly = y + BOX_H / 2 - 20;
    }
    s("path", { d, stroke: "#666", "stroke-width": 1.5, "marker-end": "url(#da-arrow3)" }, svg);
    lines(svg, lx, ly, this.stages[k].flows.split("\n"), { "text-anchor": anchor, "font-size": SMALL,
                                                         fill: "#555" }, 13);
  }

  _write(svg) {
    const keys = this.stages.map((st) => st.key);
    const [bt, y0] = this.pos[keys.indexOf("block_table")], [im, y1] = this.pos[keys.indexOf("impl")];
    if (y1 === y0) {      // one row: under the boxes
      const y = y0 + BOX_H + 18;
      s("path", { d: `M ${bt} ${y0 + BOX_H} L ${bt} ${y} L ${im} ${y} L ${im} ${y0 + BOX_H + 2}`, fill: "none",
                  stroke: WRITE, "stroke-width": 2, "stroke-dasharray": "3 3" }, svg);
      s("text", { x: (bt + im) / 2, y: y + 16, "text-anchor": "middle", "font-size": SMALL, fill: WRITE,
                  text: "slot_mapping: from the full committed row, passed through unchanged → the KV writes land where they always did" }, svg);
      return;
    }
    const xl = Math.min(bt, im) - this.bw / 2 + 16;
    s("path", { d: `M ${xl} ${y0 + BOX_H} L ${xl} ${y1}`, stroke: WRITE, "stroke-width": 2,
                "stroke-dasharray": "3 3" }, svg);
    lines(svg, 4, y1 + BOX_H + 16, wrap("slot_mapping: from the full committed row, passed through "
      + "unchanged → the KV writes land where they always did", this.width - 8, SMALL),
    { "font-size": SMALL, fill: WRITE }, 14);
  }

  _place(k) {
    const [x, y] = this.pos[k];
    this.packet.setAttribute("cx", x);
    this.packet.setAttribute("cy", y);
    this.packet.style.transform = "";
  }

  show(i, { dt = 0 } = {}) {
    if (!this.width) this.fit();
    this.i = i;
    const rec = this.run.steps[i];
    this.v = stepValues(rec);
    this.values.textContent = valuesText(this.v, this.cfg.impl);
    for (const t of this.timers || []) clearTimeout(t);
    this.anim?.cancel();
    if (!dt) { this._at(this.frame); this._note(); return; }
    // the packet travels every box within the step, the card following it
    const n = this.stages.length, [x0, y0] = this.pos[0];
    this._place(0);
    const frames = this.pos.map(([x, y], k) => ({ transform: `translate(${x - x0}px, ${y - y0}px)`,
                                                 offset: k / (n - 1) }));
    this.anim = animate(this.packet, frames, dt, { easing: "linear", fill: "forwards" });
    // the card follows the packet where a box lasts long enough to be read (else: the last)
    const each = dt / (n - 1) >= 40;
    this.timers = this.stages.map((_, k) => (each || k === n - 1
      ? setTimeout(() => this._card(k), (k / (n - 1)) * dt * 0.98) : null));
    this._note();
  }

  _at(k) {
    this.anim?.cancel();
    this._place(k);
    this._card(k);
  }

  _card(k) {
    this.shownAt = k;
    const st = this.stages[k];
    this.card.textContent = cardText(this.v, st, this.cfg.impl, this.cfg.n_attn);
    this.where.textContent = `step ${this.v.step}: packet on box ${k + 1} of ${this.stages.length}, ${st.title}`;
    this.el.setAttribute("data-da-packet", st.key);
  }

  move(d) { this.moveTo((((this.shownAt ?? this.frame) + d) % this.stages.length + this.stages.length) % this.stages.length); }
  moveTo(k) {
    if (!this.v) return;
    this.player?.pause();
    for (const t of this.timers || []) clearTimeout(t);
    this.frame = k;
    this._at(k);
  }

  _note() {
    const b = this.hub.block;
    this.hlNote.textContent = b === null || b === undefined || !this.v ? "" : blockNote(this.v, b);
  }

  destroy() { super.destroy(); for (const t of this.timers || []) clearTimeout(t); }
}

function defs(svg) {
  const d = s("defs", {}, svg);
  const m = s("marker", { id: "da-arrow3", viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 7,
                          markerHeight: 7, orient: "auto-start-reverse" }, d);
  s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#666" }, m);
}

