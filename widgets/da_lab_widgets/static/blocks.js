// Diagram 2 — blocks, the block table and the physical KV cache, for the request followed:
//   (a) its logical blocks coloured by DA region; the last one filled to seq_len;
//   (b) the staged row (BlockTable.append_row, a CPU numpy array on the host): logical ->
//       physical; a block new this step lands in it;
//   (b') the committed row, after commit() copies the staged row to the device (on a CPU the
//       same memory);
//   (c) the kernel row as the attention builder read it (read_row): kept blocks first, then
//       the hidden ones greyed — the kernel reads only the coloured part; it moves as it
//       shrinks and grows;
//   (d) the physical KV cache, one cell per block, coloured by owner;
//   (e) with batch=True, every request of the step, one row each, its physical blocks shared
//       with other rows marked (batch.js).
// Every number comes from the step (store.js). Hover a block anywhere: its physical block
// pulses in every diagram of the page that shows it.

import { BatchRows } from "./batch.js";
import { animate, esc, h, hideTip, s, showTip, SMALL } from "./dom.js";
import { Diagram } from "./diagram.js";
import { Grid } from "./grid.js";
import { CACHED, FLASH, HL, ink, MASKED, ownerColor, RequestView, RESPONSE, SHARED } from "./look.js";
import { Strip } from "./strip.js";

const LEFT = 226, ROW_H = 24, PITCH = 46, TOP = 8;

export class BlocksDiagram extends Diagram {
  constructor(ctx) {
    super(2, "da-blocks", ctx);
    this.view = null;
    this.titleEl = h("div", { class: "da-title" }, this.el);
    this.svg = s("svg", { class: "da-svg" }, this.el);
    // a still image (export --out) can't be hovered: no hint there
    this.hint = this.session.cfg.still ? "" : HINT;
    this.label = h("div", { class: "da-highlight", text: this.hint }, this.el);
    this.offHub = this.hub.on(() => this._marks());
    this.svg.addEventListener("mousemove", (e) => this._hover(e));
    this.svg.addEventListener("mouseleave", () => { hideTip(); this.hub.set(null, "blocks"); });
  }

  layout(w) {
    this.rowsKey = null;
    this.grid = null;
    this.svg.replaceChildren();
    const svg = this.svg;
    const plotW = w - LEFT - 12;
    const cpu = (this.run.header.provenance || {}).device === "cpu";
    const v2 = (this.run.header.provenance || {}).runner_kind === "v2";
    const rows = [
      ["logical", "(a) logical blocks", "coloured by DA region"],
      ["staged", "(b) staged row", v2
        ? "append_block_ids() · host" : "append_row() · host (CPU numpy)"],
      ["device", "(b′) committed row", cpu ? "commit(): same memory on the CPU"
        : "commit(): host → device copy"],
      ["kernel", "(c) kernel row", "as the builder read it: kept first"],
    ];
    // A hybrid model's other KV-cache groups (sliding window, recurrent state): their rows as
    // vLLM built them, the blocks the kernel reads in colour (core/group_rows.py).
    (this.groups || []).forEach((g, k) => rows.push(
      [`group${k}`, `(e${k + 1}) group ${g.group}: ${KIND_NAMES[g.kind] || g.kind}`,
       g.window ? `reads its last ${g.window} tokens; DA leaves it as built`
         : "read as vLLM builds it; DA leaves it as built"]));
    this.strips = {};
    this.rowLabels = {};
    rows.forEach(([key, title, sub], k) => {
      const y = TOP + k * PITCH;
      const t = s("text", { x: 4, y: y + 11, "font-size": 12, "font-weight": "bold",
                            text: title }, svg);
      this.rowLabels[key] = t;
      s("text", { x: 4, y: y + 26, "font-size": SMALL, fill: "#555", text: sub }, svg);
      this.strips[key] = new Strip(svg, { x: LEFT, y, w: plotW, h: ROW_H, name: key });
    });
    // commit(): the staged row copied to the device, drawn as a band moving down each step
    const yb = TOP + PITCH + ROW_H, yd = TOP + 2 * PITCH;
    s("path", { d: `M ${LEFT - 12} ${yb + 2} L ${LEFT - 12} ${yd - 2}`, stroke: "#777",
                "stroke-width": 1.5, "marker-end": "url(#da-arrow)" }, svg);
    defs(svg);
    this.copyBand = s("rect", { x: LEFT, y: yb, width: plotW, height: 5, fill: "#1f6fb4",
                                opacity: 0, class: "da-commit" }, svg);
    this.last = s("g", { class: "da-last-block" }, svg);
    const gy = TOP + rows.length * PITCH + 22;
    this.caption = s("text", { x: 4, y: gy - 6, "font-size": 12 }, svg);
    this.grid = new Grid(svg, this.run, { x: 4, y: gy, width: Math.min(560, w * 0.5),
                                          shared: !!this.cfg.batch });
    this.keyEl = s("g", {}, svg);
    this.svg.setAttribute("width", w);
    this.svg.setAttribute("height", gy + this.grid.height + 8);
    this._memory(w, yb, yd, gy + this.grid.height + 8, cpu);
    this.batch = this.cfg.batch ? new BatchRows(svg, this.run, {
      y: gy + this.grid.height + 14, left: LEFT, w: plotW }) : null;
    const prov = this.run.header.provenance || {};
    this.caption.textContent = `(d) physical KV cache: ${this.run.numBlocks} blocks × `
      + `${this.run.blockSize} tokens — ${prov.vllm || ""}, ${prov.backend || ""}`;
  }

  // Where each row lives: host memory (the staged row, a numpy array) above, the device's
  // (GPU HBM: the block table the kernel reads, the KV cache) below; commit() is the copy
  // between them. On a CPU both are the same memory and commit() copies nothing.
  _memory(w, yb, yd, bottom, cpu) {
    const svg = this.svg, first = svg.firstChild;
    const band = (y0, y1, fill, name) => svg.insertBefore(s("rect", {
      x: 0, y: y0, width: w, height: y1 - y0, fill, "data-memory": name }), first);
    band(0, yb + 4, "#f3f7fb", "host");
    band(yd - 6, bottom, cpu ? "#f3f7fb" : "#fbf5ee", "device");
    const say = cpu ? "CPU: host and device are the same memory; commit() copies nothing"
      : "above: host (CPU RAM) · commit() copies host → device · below: GPU HBM";
    s("text", { x: w - 12, y: yd - 9, "text-anchor": "end", "font-size": SMALL, fill: "#555",
                "data-memory": "note", text: say }, svg);
  }

  follow(req) { this.req = req; this.view = null; this.rowsKey = null; this.drawnAt = -1; }

  // "+ new request": every diagram of the player follows the new request (as diagram 4 does)
  state(st) {
    if (st.follow && st.follow !== this.req) {
      this.follow(st.follow);
      if (this.i >= 0 && this.visible) { this.show(this.i, {}); this.drawnAt = this.i; }
    }
  }

  show(i, { dt = 0 } = {}) {
    const rec = this.begin(i), run = this.run;
    if (!rec) return;
    if (!this.view || this.view.req !== this.req) this.view = new RequestView(run, this.req);
    const v = this.view, hh = run.request(i, this.req);
    this.h = hh;
    if (hh && hh.groups && !sameGroups(hh.groups, this.groups)) {
      this.groups = hh.groups.map(({ group, kind, window }) => ({ group, kind, window }));
      this.layout(this.width);       // a row per group, from the first step that shows them
    }
    const prevH = i > 0 ? run.request(i - 1, this.req) : null;
    const staged = hh && hh.staged_row ? hh.staged_row : new Int32Array(0);
    const before = new Set(prevH && prevH.staged_row ? prevH.staged_row : []);
    this.fresh = new Set([...staged].filter((p) => !before.has(p)));
    if (!hh || !hh.hooked) {
      this.titleEl.textContent = `step ${rec.step}: ${this.req} did not run`;
      this._labels(null);
      for (const st of Object.values(this.strips)) st.draw([], v.slots);
      this.last.replaceChildren();
      this.rowsKey = null;
    } else this._rows(rec, hh, staged, dt);
    // the cache changes only where a step says so
    const quiet = !Object.keys(rec.kv.assign).length && !rec.kv.free.length
      && !rec.kv.cached.length && !rec.kv.uncached.length;
    if (!(this.grid.at === i || (this.grid.at === i - 1 && quiet))) {
      this.grid.draw(i, dt, new Set(Object.keys(rec.kv.assign).map(Number)));
      this._key();
    } else this.grid.at = i;
    if (this.batch) {
      const bottom = this.batch.y + this.batch.draw(rec) + 8;
      this.svg.setAttribute("height", Math.max(bottom, this.grid.y + this.grid.height + 8));
    }
    if (dt) {
      animate(this.copyBand, [{ opacity: 0.55, transform: "translateY(0)" },
                              { opacity: 0, transform: `translateY(${PITCH - ROW_H}px)` }], dt * 0.6);
    }
    this._marks();
  }

  _rows(rec, hh, staged, dt) {
    const v = this.view, total = hh.blocks_total, bs = hh.block_size, ns = staged.length;
    const slots = v.fit(Math.max(ns, total));
    const kept = hh.kept, read = hh.read_row || new Int32Array(0);
    const fill = hh.seq_len - (total - 1) * bs;
    this.titleEl.innerHTML = `<b>step ${rec.step}</b> · ${esc(v.req)} · ${esc(hh.mode)} · `
      + `seq_len ${hh.seq_len}: ${total} blocks, last ${fill}/${bs} full · kernel reads `
      + `${hh.blocks_read} blocks, attention seq_len ${hh.attn_seq_len}`;
    this._labels([total, ns, read.length]);
    const key = { req: v.req, total, staged, read, kept, slots, partial: hh.partial.size };
    if (!sameRows(key, this.rowsKey)) {
      this.rowsKey = key;
      const blk = (j, id) => ({ fill: v.color(j), ink: ink(v.color(j)), id, lb: j });
      const stagedB = Array.from(staged, (p, j) => blk(j, p));
      const logical = [];
      for (let j = 0; j < total; j++) logical.push({ ...blk(j, j < ns ? staged[j] : null), tag: j });
      const keptSet = new Set(kept);
      const order = Array.from(read, (p, k) => {
        const lb = k < kept.length ? kept[k] : null;
        const col = lb !== null && lb < slots ? v.color(lb) : RESPONSE;
        return { fill: col, ink: ink(col), id: p, lb, read: true, partial: hh.partial.has(lb) };
      });
      for (let lb = 0; lb < Math.min(total, ns); lb++) {
        if (!keptSet.has(lb)) order.push({ fill: MASKED, ink: "#666", id: staged[lb], lb, read: false });
      }
      const fresh = dt ? this.fresh : null;
      this.strips.logical.draw(logical, slots, { dt });
      this.strips.staged.draw(stagedB, slots, { dt, fresh });
      this.strips.device.draw(stagedB.map((b) => ({ ...b })), slots, {});
      this.strips.kernel.draw(order, slots, { dt });
      this.order = order;
    }
    // the window moves within a block row that did not change: drawn every step (few blocks)
    (hh.groups || []).forEach((g, k) => this._groupRow(k, g, hh.seq_len, slots, dt));
    this._lastBlock(total - 1, fill, bs, slots, dt);
  }

  // One other group's row: the blocks holding its last `window` tokens read (a sliding
  // window), or all of them (a state group); older ids vLLM left in the row greyed.
  _groupRow(k, g, seqLen, slots, dt) {
    const st = this.strips[`group${k}`];
    if (!st) return;
    const bs = g.block_size, n = bs ? Math.min(g.row.length, Math.ceil(seqLen / bs)) : g.row.length;
    const first = g.window && bs ? Math.floor(Math.max(0, seqLen - g.window) / bs) : 0;
    const blocks = [];
    for (let j = 0; j < n; j++) {
      const read = j >= first, col = read ? this.view.color(Math.min(j, slots - 1)) : MASKED;
      blocks.push({ fill: col, ink: read ? ink(col) : "#666", id: g.row[j], lb: j, read,
                    group: g.group });
    }
    st.draw(blocks, slots, { dt });
    const base = this.rowLabels[`group${k}`].textContent.split(" ·")[0];
    this.rowLabels[`group${k}`].textContent = `${base} · reads ${n - first} of ${n}`;
  }

  // the rows' counts beside their names (none when the request has no row this step)
  _labels(n) {
    const [total, ns, read] = n || [];
    const base = (k) => this.rowLabels[k].textContent.split(" ·")[0];
    this.rowLabels.logical.textContent = base("logical") + (n ? ` · ${total}` : "");
    this.rowLabels.staged.textContent = base("staged") + (n ? ` · ${ns}` : "");
    this.rowLabels.kernel.textContent = base("kernel") + (n ? ` · reads ${read}` : "");
  }

  // the last logical block, filled token by token up to seq_len (drawn over its run)
  _lastBlock(j, fill, bs, slots, dt) {
    const st = this.strips.logical, c = st.cell(), x = st.x + j * c, w = Math.max(2, c);
    this.last.replaceChildren();
    const g = this.last;
    const col = this.view.color(j);
    s("rect", { x, y: st.y, width: w, height: st.h, fill: "#f4f4f4", stroke: "#bbb" }, g);
    const hgt = st.h * fill / bs;
    const r = s("rect", { x, y: st.y + st.h - hgt, width: w, height: hgt, fill: col,
                          "data-fill-tokens": `${fill}/${bs}`, "data-slot": j }, g);
    if (dt && this.lastFill && this.lastFill[0] === j && this.lastFill[1] < fill) {
      const h0 = st.h * this.lastFill[1] / bs;
      animate(r, [{ height: `${h0}px`, y: `${st.y + st.h - h0}px` },
                  { height: `${hgt}px`, y: `${st.y + st.h - hgt}px` }], dt);
    }
    this.lastFill = [j, fill];
    if (c >= 22) {
      s("text", { x: x + w / 2, y: st.y + st.h / 2 + 4, "text-anchor": "middle", "font-size": SMALL,
                  fill: 2 * fill >= bs ? ink(col) : "#111", text: String(j) }, g);
    }
  }

  _key() {
    this.keyEl.replaceChildren();
    const g = this.keyEl;
    const x = this.grid.x + this.grid.width + 18;
    let y = this.grid.y + 12;
    const line = (color, text, outline) => {
      s("rect", { x, y: y - 10, width: 12, height: 12, fill: outline ? "none" : color,
                  stroke: outline ? color : "none", "stroke-width": 2 }, g);
      s("text", { x: x + 18, y, "font-size": 12, text }, g);
      y += 18;
    };
    s("text", { x, y, "font-size": 12, "font-weight": "bold", text: "owner" }, g);
    y += 18;
    for (const o of this.grid.owners) line(ownerColor(this.run, o), o);
    line(CACHED, "free, prefix-cached");
    line("#eeeeee", "free");
    line(FLASH, "appended this step", true);
    if (!this.session.cfg.still) line(HL, "hovered (pulses in every diagram)", true);
    if (this.batch) line(SHARED, "bar under a block: one block, several rows", true);
    // the paper's unpadded chunks: a kept block that also holds hidden tokens (read whole)
    s("rect", { x, y: y - 10, width: 12, height: 12, fill: "none", stroke: "#333",
                "stroke-width": 1.5, "stroke-dasharray": "3 2" }, g);
    s("text", { x: x + 18, y, "font-size": 12, text: "read whole, holds hidden tokens" }, g);
  }

  _marks() {
    const p = this.hub.block;
    for (const st of Object.values(this.strips || {})) st.clearMarks();
    if (!this.grid) return;
    this.grid.clearMarks();
    if (this.fresh && this.fresh.size) {
      for (const k of ["staged", "device"]) this.strips[k].mark((b) => this.fresh.has(b.id), FLASH);
      this.grid.mark(this.fresh, FLASH);
    }
    if (p !== null && p !== undefined) {
      for (const st of Object.values(this.strips)) st.mark((b) => b.id === p, HL, "da-pulse", 3);
      this.grid.mark(new Set([p]), HL, "da-pulse");
    }
    if (this.batch) this.batch.mark(p, HL, "da-pulse");
    this.label.textContent = p === null || p === undefined ? this.hint : this._describe(p);
  }

  _describe(p) {
    const rec = this.run.steps[this.i];
    const reqs = [...rec.requests].sort((a, b) => (a.req !== this.req) - (b.req !== this.req));
    for (const hh of reqs) {
      const row = hh.staged_row;
      const j = row ? row.indexOf(p) : -1;
      const more = this.batch ? this.batch.describe(p) : "";
      if (j >= 0) return `block ${p}: logical ${j} of ${hh.req}, physical slot ${p}${more}`;
    }
    const kv = this.grid.kv, o = kv ? kv.sets[kv.owners[p]] || [] : [];
    if (o.length) return `block ${p}: held by ${o.join(", ")} (not scheduled this step), physical slot ${p}`;
    if (kv && kv.cached[p]) return `block ${p}: free, prefix-cached, physical slot ${p}`;
    return `block ${p}: free, physical slot ${p}`;
  }

  _hover(e) {
    const gp = this.grid.cellAt(e.clientX, e.clientY);
    if (gp !== null) { showTip(e, this.grid.describe(gp)); this.hub.set(gp, "blocks"); return; }
    const box = this.svg.getBoundingClientRect(), y = e.clientY - box.top;
    const hit = this.batch ? this.batch.at(e.clientX, e.clientY, box) : null;
    if (hit) { showTip(e, hit.tip); this.hub.set(hit.block, "blocks"); return; }
    for (const [key, st] of Object.entries(this.strips)) {
      if (y < st.y - 4 || y > st.y + st.h + 4) continue;
      const j = st.slotAt(e.clientX);
      const b = j === null ? null : st.blocks[j];
      if (!b || b.id === null || b.id === undefined) break;
      showTip(e, this._tip(key, j, b));
      this.hub.set(b.id, "blocks");
      return;
    }
    hideTip();
  }

  _tip(key, j, b) {
    const reg = (lb) => (lb === null || lb === undefined ? "" : this.view.region(lb));
    if (key === "logical") return `logical ${j} (${reg(j)}) → physical ${b.id}`;
    if (key === "staged") return `staged[${j}] = physical ${b.id} (logical ${j}, ${reg(j)})`;
    if (key === "device") return `committed row[${j}] = physical ${b.id} (commit() of the staged row)`;
    if (key.startsWith("group")) {
      return `group ${b.group} row[${j}] = physical ${b.id}: `
        + (b.read ? "read (DA never masks this group)" : "outside the window, not read");
    }
    return `kernel row ${j}: physical ${b.id} (logical ${b.lb ?? "–"}, ${reg(b.lb)}): `
      + (b.read ? "read" : "hidden, not read");
  }

}

// the rows are redrawn only when their blocks change (a new block, a mode switch)
const KIND_NAMES = { sliding: "sliding window", chunked: "chunked local attention",
                     state: "recurrent state" };

function sameGroups(a, b) {
  return !!b && a.length === b.length
    && a.every((g, k) => g.group === b[k].group && g.kind === b[k].kind && g.window === b[k].window);
}

function sameRows(a, b) {
  if (!b || a.req !== b.req || a.total !== b.total || a.slots !== b.slots) return false;
  return same(a.staged, b.staged) && same(a.read, b.read) && same(a.kept, b.kept)
    && a.partial === b.partial;
}

function same(x, y) {
  if (x === y) return true;
  if (!x || !y || x.length !== y.length) return false;
  for (let k = 0; k < x.length; k++) if (x[k] !== y[k]) return false;
  return true;
}

const HINT = "hover a block to follow it through every panel and diagram";

function defs(svg) {
  const d = s("defs", {}, svg);
  const m = s("marker", { id: "da-arrow", viewBox: "0 0 10 10", refX: 8, refY: 5,
                          markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" }, d);
  s("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#777" }, m);
}
