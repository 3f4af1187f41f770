// Diagram 1 — the model as a skeleton whose slots vLLM filled at load time (the boxes come
// from the run's header, skeleton.py arranges them), bottom (token ids) to top (logits). Each
// step the attention boxes light up for the step's attention call and the note beside them
// gives its numbers. The "what if" buttons ask the kernel, which starts a real engine.

import { animate, h, hideTip, s, showTip, SMALL, textWidth, wrap } from "./dom.js";
import { Diagram } from "./diagram.js";
import { PACKET } from "./look.js";
import { short } from "./pathtext.js";

// 14 px lines, 5 px gaps and one-line boxes where a row has room keep the skeleton of a small
// model within one 768 px screen under the player's controls
const LINE = 13, GAP = 4, PAD = 14, GL = 150, SLOT_LINE = "#8a8a8a", SEP = "  ·  ";

export class SkeletonDiagram extends Diagram {
  constructor(ctx) {
    super(1, "da-skeleton", ctx, 1400);
    const { el, cfg, session } = this;
    this.titleEl = h("div", { class: "da-title" }, el);
    this.svg = s("svg", { class: "da-svg" }, el);
    this.capEl = h("div", { class: "da-caption da-skeleton-caption" }, el);
    // this run's drawing; a variant's answer may draw its own in its place (_panel)
    this.own = { rows: cfg.rows, groups: cfg.groups, title: cfg.title, caption: cfg.caption,
                 impls: cfg.impls, n_attn: cfg.n_attn };
    this.drawing = null;
    this._words();
    const bar = h("div", { class: "da-buttons" }, el);
    this.buttons = {};
    for (const [kind, label] of Object.entries(cfg.variants)) {
      const b = h("button", { text: label, "data-da-variant": kind,
                              on: { click: () => this._ask(kind) } }, bar);
      if (!session.cfg.kernel) { b.disabled = true; b.title = "needs a running kernel: open the notebook"; }
      this.buttons[kind] = b;
    }
    this.backB = h("button", { text: "back to this run's skeleton", "data-da-variant": "own",
                               style: "display:none", on: { click: () => this._ask("own") } }, bar);
    this.status = h("div", { class: "da-caption", "data-da-part": "status" }, el);
    this.answer = h("div", { class: "da-answer", "data-da-part": "answer" }, el);
    this._panel(cfg.panel || {});
    this.svg.addEventListener("mouseleave", hideTip);
  }

  _ask(kind) { this.session.send({ type: "variant", kind }); this.status.textContent = "asking the kernel…"; }

  state(st, msg) { if (msg.panel) this._panel(msg.panel); }

  _panel(p) {
    this.status.textContent = p.status || "";
    this.answer.innerHTML = p.answer || "";     // made by skeleton_answers.py, values escaped
    const want = p.view || null;
    if (JSON.stringify(want) === JSON.stringify(this.drawing)) return;
    this.drawing = want;
    Object.assign(this.cfg, want || this.own);
    this.el.dataset.daDrawing = want ? "variant" : "run";
    this.backB.style.display = want ? "" : "none";
    this._words();
    if (this.width) { this.width = 0; this.fit(); }
  }

  _words() {
    this.titleEl.replaceChildren();
    for (const [t, st] of this.cfg.title) h(st === "b" ? "b" : "span", { text: t }, this.titleEl);
    // the engine's config and compilation one click away: the drawing then fits one screen
    const more = this.cfg.caption.filter((p) => /^(config|compilation):/.test(p));
    this.capEl.replaceChildren(...this.cfg.caption.filter((p) => !more.includes(p))
      .map((p) => h("div", { text: p })));
    if (more.length) {
      const d = h("details", {}, this.capEl);
      h("summary", { text: "the engine's config and compilation" }, d);
      for (const p of more) h("div", { text: p }, d);
    }
  }

  layout(w) {
    const x0 = GL + 8, x1 = Math.min(w - 250, 760), svg = this.svg;
    this.x1 = x1;
    svg.replaceChildren();
    const placed = [];               // [rowIndex, box, x, width, lines, yFromBottom, height]
    let y = 0;
    const spans = new Map();
    this.cfg.rows.forEach((row, ri) => {
      const width = (ls) => Math.max(12 * 6.6, ...ls.map(lineWidth)) + PAD;
      // (one line of text: 3% to spare, as the canvas's measure and the SVG's may differ)
      const fits = (u, room = 1) => u.map(width).reduce((a, b) => a + b, 0) <= room * (x1 - x0);
      let use = row.boxes.map((b) => [oneLine(b.lines)]);      // a box's lines side by side
      if (!fits(use, 0.97)) use = row.boxes.map((b) => b.lines);
      if (!fits(use)) use = row.boxes.map((b) => b.wrapped);
      const need = use.map(width);
      const groups = [[]];
      need.forEach((nd, k) => {
        const cur = groups[groups.length - 1];
        if (cur.length && cur.reduce((a, j) => a + need[j], 0) + nd > x1 - x0) groups.push([k]);
        else cur.push(k);
      });
      const start = y;
      for (const line of groups) {
        // a box alone on its line may still fit on one line of text
        // a row split over several lines may have room on each for fewer, longer lines
        const flat = line.length === 1 ? [oneLine(row.boxes[line[0]].lines)] : null;
        const full = line.map((k) => row.boxes[k].lines);
        if (flat && fits([flat], 0.97)) { use[line[0]] = flat; need[line[0]] = width(flat); }
        else if (groups.length > 1 && fits(full)) {
          line.forEach((k, j) => { use[k] = full[j]; need[k] = width(full[j]); });
        }
        const hgt = Math.max(...line.map((k) => use[k].length)) * LINE + 7;
        const total = line.reduce((a, k) => a + need[k], 0);
        let x = x0;
        for (const k of line) {
          const bw = ((x1 - x0) * need[k]) / total;
          placed.push({ box: row.boxes[k], x: x + 3, w: bw - 6, lines: use[k], y, hgt });
          x += bw;
        }
        y += hgt + GAP;
      }
      const grouped = row.group !== undefined && row.group !== null;
      const next = this.cfg.rows[ri + 1];
      if (grouped && (!next || next.group !== row.group)) {
        // a group's last row: the group is at least as tall as its label
        const g0 = spans.get(row.group)?.[0] ?? start;
        const lab = this.cfg.groups[row.group].label.flatMap((ln) => wrap(ln, GL - 10, 12));
        y = Math.max(y, g0 + lab.length * 16 + 8);
      }
      if (grouped) {
        const g = spans.get(row.group) || [start, y];
        spans.set(row.group, [Math.min(g[0], start), y]);
      }
    });
    const H = y + 10;
    this.height = H;
    const top = (yb, hgt) => H - yb - hgt;        // bottom-up coordinates to SVG's
    for (const [gi, [a, b]] of spans) {
      const yt = top(a - 6, b - a + 2);
      s("rect", { x: 2, y: yt, width: x1 + 3, height: b - a + 2, fill: "rgba(120,120,120,0.06)",
                  stroke: "#555", "stroke-width": 1.5 }, svg);
      const lab = this.cfg.groups[gi].label.flatMap((ln) => wrap(ln, GL - 10, 12));
      const t = s("text", { x: GL / 2, y: yt + (b - a) / 2 - (lab.length - 1) * 8 + 4,
                            "text-anchor": "middle", "font-size": 12, fill: "#333" }, svg);
      lab.forEach((ln, k) => s("tspan", { x: GL / 2, dy: k ? 16 : 0, text: ln }, t));
    }
    this.attn = [];
    let anchor = null;
    for (const p of placed) {
      const yt = top(p.y, p.hgt);
      const g = s("g", { class: "da-slot", on: { mousemove: (e) => showTip(e, p.box.hover) } }, svg);
      const r = s("rect", { x: p.x, y: yt, width: p.w, height: p.hgt, rx: 3,
                            fill: p.box.io ? "white" : "#e4e4e4", stroke: SLOT_LINE, "stroke-width": 1.2,
                            "stroke-dasharray": p.box.io ? "2 3" : null }, g);
      const t = s("text", { "text-anchor": "middle", "font-size": SMALL, fill: "#222" }, g);
      p.lines.forEach((ln, k) => {
        const first = s("tspan", { x: p.x + p.w / 2, y: yt + 14 + k * LINE }, t);
        ln.forEach(([txt, st], n) => {
          const span = n ? s("tspan", {}, t) : first;
          if (st === "b") span.setAttribute("font-weight", "bold");
          if (st === "i") span.setAttribute("font-style", "italic");
          span.textContent = txt;
        });
      });
      if (p.box.attn) {
        this.attn.push(r);
        r.setAttribute("data-attention", "");
        if (!anchor || yt < anchor[1]) anchor = [p.x + p.w - 8, yt];
      }
    }
    // the hidden states flow up through every slot
    s("path", { d: `M ${x1 + 16} ${H - 4} L ${x1 + 16} 6`, stroke: "#aaa", "stroke-width": 1.5,
                "marker-end": "url(#da-arrow1)" }, svg);
    const hs = s("text", { x: x1 + 30, y: H / 2, "font-size": SMALL, fill: "#777",
                           transform: `rotate(-90 ${x1 + 30} ${H / 2})`, "text-anchor": "middle",
                           text: "hidden states flow up" }, svg);
    hs.setAttribute("pointer-events", "none");
    marker(svg);
    // the step note, beside the attention boxes
    const nx = x1 + 46, nw = w - nx - 4, ny = anchor ? Math.max(4, Math.min(anchor[1] - 20, H - 175)) : 4;
    if (anchor) {
      s("path", { d: `M ${anchor[0]} ${anchor[1]} L ${nx} ${ny + 20}`, stroke: PACKET, "stroke-width": 1.5,
                  fill: "none", "marker-end": "url(#da-arrow1o)" }, svg);
    }
    s("rect", { x: nx, y: ny, width: nw, height: 170, fill: "white", stroke: PACKET, rx: 3 }, svg);
    this.note = s("text", { x: nx + 8, y: ny + 18, "font-size": 12, fill: PACKET, "data-da-part": "note" }, svg);
    this.noteW = nw - 16;
    svg.setAttribute("width", w);
    svg.setAttribute("height", H);
  }

  show(i, { dt = 0 } = {}) {
    if (!this.width) this.fit();
    this.i = i;
    const rec = this.run.steps[i], md = rec.metadata, on = !!md;
    for (const r of this.attn) {
      r.setAttribute("stroke", on ? PACKET : SLOT_LINE);
      r.setAttribute("stroke-width", on ? 3 : 1.2);
      if (on && dt) animate(r, [{ strokeWidth: 7, fill: "#ffe1cc" }, { strokeWidth: 3, fill: "#e4e4e4" }], dt);
    }
    this.note.replaceChildren();
    const ln = [];
    if (!md) ln.push([`step ${rec.step}: no attention metadata recorded`, "b"], ["(no DA request was built this step)"]);
    else {
      const q = Array.from(md.query_start_loc), nTok = q.length ? q[q.length - 1] - q[0] : 0;
      const nReq = Math.max(q.length - 1, 0);
      ln.push([`step ${rec.step}: attention call`, "b"], [`backend ${md.backend}`, "b"],
              [`(${this.cfg.impls.join(", ")})`],
              [`${nTok} query token${nTok !== 1 ? "s" : ""} from ${nReq} request${nReq !== 1 ? "s" : ""}`],
              [`query_start_loc ${short(q, 4)}`], [`seq_lens (kernel) ${short(md.seq_lens, 4)}`],
              [`× ${this.cfg.n_attn} attention layers, same metadata`]);
    }
    let k = 0;
    for (const [t, st] of ln) {
      for (const part of fit(t, this.noteW)) {
        s("tspan", { x: this.note.getAttribute("x"), dy: k++ ? 16 : 0, "font-weight": st === "b" ? "bold" : null,
                     text: part }, this.note);
      }
    }
  }

}

function oneLine(lines) {
  const out = [];
  lines.forEach((ln, k) => { if (k) out.push([SEP, ""]); out.push(...ln); });
  return out;
}

function lineWidth(pieces) {
  return pieces.reduce((a, [t, st]) => a + textWidth(t, SMALL, st === "b" ? "bold" : "normal"), 0);
}

function fit(t, w) {
  // break a note line at ", " or spaces to fit the note's box
  if (textWidth(t, 12) <= w) return [t];
  const out = [];
  let cur = "";
  for (const word of t.split(" ")) {
    const next = cur ? `${cur} ${word}` : word;
    if (cur && textWidth(next, 12) > w) { out.push(cur); cur = word; } else cur = next;
  }
  return [...out, cur];
}

function marker(svg) {
  const d = s("defs", {}, svg);
  for (const [id, fill] of [["da-arrow1", "#aaa"], ["da-arrow1o", PACKET]]) {
    const m = s("marker", { id, viewBox: "0 0 10 10", refX: 8, refY: 5, markerWidth: 7,
                            markerHeight: 7, orient: "auto-start-reverse" }, d);
    s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill }, m);
  }
}
