// Diagram 4 — the DA hook, animated. Per step, for the request followed: the lamps (the mode),
// the hook's tag buffer, the response stream, the three bands a step passes through (model
// code, metadata path + DA hook, kernel) with this step's numbers, the request's row of logical
// blocks coloured by region with the masked ones grey, the blocks the kernel reads (they close
// ranks as the row shrinks, and spread again as it grows), and blocks read per step. With a
// live engine, "steer it yourself" sits beside the lamps and the stream.

import { esc, h, hideTip, s, showTip, SMALL } from "./dom.js";
import { Chart } from "./chart.js";
import { Diagram } from "./diagram.js";
import { HL, ink, MASKED, RequestView } from "./look.js";
import { Lamps, Steering, streamHtml, TagBuffer } from "./stream.js";
import { Strip } from "./strip.js";

const ROW_H = 22, LEFT = 150;

export class HookDiagram extends Diagram {
  constructor(ctx) {
    super(4, "da-dahook", ctx);
    const { el, cfg, session } = this;
    h("div", { class: "da-title", html: cfg.title || "<b>The DA hook</b>" }, el);
    const top = h("div", { class: "da-hook-top" }, el);
    const left = h("div", { class: "da-hook-left" }, top);
    const lamps = h("div", { class: "da-lamp-row" }, left);
    this.lamps = new Lamps(lamps);
    this.buffer = new TagBuffer(lamps);
    h("div", { class: "da-caption", html: "response after this step (the newest token last, "
      + "in <span class='da-new'>blue</span>):" }, left);
    // column-reverse: the box stays scrolled to its end (the newest token) with no layout read
    const box = h("div", { class: "da-stream", "data-da-part": "stream" }, left);
    this.stream = h("div", { class: "da-stream-text" }, box);
    const live = !!cfg.steer && !!session.cfg.kernel;
    this.steer = new Steering(h("div", { class: "da-hook-right" }, top), session, live);
    this.steer.offWhy = steerOff(session.cfg, cfg);
    this.steer.onPress = () => ({ i: this.player?.i ?? null, following: this._atEngine() });
    this.noteEl = h("div", { class: "da-note" }, el);
    this.bands = {};
    const bands = h("div", { class: "da-bands" }, el);
    for (const k of ["model", "hook", "kernel"]) this.bands[k] = h("div", { class: `da-band da-band-${k}` }, bands);
    this.rowTitle = h("div", { class: "da-title" }, el);
    this.svg = s("svg", { class: "da-svg", height: 2 * ROW_H + 26 }, el);
    this.keyEl = h("div", { class: "da-caption" }, el);
    this.readEl = h("div", { class: "da-blocks-read", "data-da-part": "blocks-read" }, el);
    this.chart = new Chart(el, { width: 880, height: 120 });
    this.offHub = this.hub.on(() => this._marks());
    this.svg.addEventListener("mousemove", (e) => this._hover(e));
    this.svg.addEventListener("mouseleave", () => { hideTip(); this.hub.set(null, "dahook"); });
  }

  layout(w) {
    this.svg.replaceChildren();
    this.svg.setAttribute("width", w);
    const label = (y, a, b) => {
      s("text", { x: 0, y: y + 10, "font-size": 12, "font-weight": "bold", text: a }, this.svg);
      s("text", { x: 0, y: y + 23, "font-size": SMALL, fill: "#555", text: b }, this.svg);
    };
    label(2, "logical row", "what the request holds");
    label(ROW_H + 16, "kernel reads", "kept blocks, in order");
    this.held = new Strip(this.svg, { x: LEFT, y: 2, w: w - LEFT - 8, h: ROW_H, name: "held" });
    this.reads = new Strip(this.svg, { x: LEFT, y: ROW_H + 16, w: w - LEFT - 8, h: ROW_H, name: "reads" });
    this.chart.resize(w);
    this.rowKey = null;
  }

  state(st) {
    if (st.follow && st.follow !== this.req) {
      this.req = st.follow; this.view = null; this.rowKey = null; this.drawnAt = -1;
    }
    if (this.i >= 0) this._steer();
  }

  // the player paused or played: whether the step on screen is the engine's changed
  controls() { if (this.i >= 0) this._steer(); }

  show(i, { dt = 0 } = {}) {
    const rec = this.begin(i), run = this.run;
    if (!rec) return;
    if (!this.view || this.view.req !== this.req) this._bind();
    const hh = run.request(i, this.req), hooked = !!(hh && hh.hooked);
    const ser = run.series(this.req), k = ser.upto(i);
    // lamps, buffer, stream
    const prevEnd = i > 0 ? ser.textEnd[i - 1] : 0;
    const buf = hooked ? hh.tag_buffer : "";
    const trapped = hooked ? hh.events.filter((e) => e.kind === "tag_trapped") : [];
    const prevH = i > 0 ? run.request(i - 1, this.req) : null;
    this.lamps.set(hooked ? hh.mode : null);
    this.buffer.set(buf, trapped.length ? trapped[trapped.length - 1].text : null,
                    prevH && prevH.hooked ? prevH.tag_buffer : "", dt);
    this.stream.innerHTML = streamHtml(ser.text(i), ser.tags, i, prevEnd, buf);
    const away = hooked ? "" : absent(ser, i, this.req);
    this.lamps.away(away);
    this._bands(rec, hooked ? hh : null, away);
    this.readEl.textContent = hooked ? `blocks read: ${hh.blocks_read} of ${hh.blocks_total}`
      : `blocks read: – (${away})`;
    this._row(hooked ? hh : null, dt, away);
    this.chart.draw(ser.steps, ser.read, ser.total, k);
    this._steer();
    this._marks();
  }

  _bind() {
    const v = (this.view = new RequestView(this.run, this.req));
    const sw = (c) => `<span style="color:${c}">■</span>`;
    const chunks = v.nChunks ? `C1–C${v.nChunks}` : "prompt";
    const seen = new Map();
    for (let j = 0; j < v.slots; j++) if (!seen.has(v.region(j))) seen.set(v.region(j), v.color(j));
    const cs = [...seen].filter(([r]) => r.startsWith("C")).map(([, c]) => sw(c)).join("");
    this.keyEl.innerHTML = `${sw(seen.get("scaffold") || seen.get("prompt") || "#ccc")} S scaffold head · `
      + `${cs} chunks ${chunks} · ${sw(seen.get("tail") || "#ccc")} Q question (scaffold tail) · `
      + `${sw(seen.get("response") || "#ccc")} R response · ${sw(MASKED)} masked (hidden from the kernel this step)`;
    this.noteEl.innerHTML = ((this.session.state.notes || {})[this.req]) || (this.cfg.notes || {})[this.req] || "";
    this.rowKey = null;
  }

  _bands(rec, hh, away) {
    const band = (key, label, detail, active = false) => {
      this.bands[key].innerHTML = `<b>${esc(label)}</b> <span style="color:#444">${detail}</span>`;
      this.bands[key].classList.toggle("da-band-active", active);
    };
    const kernel = `kernel (${this.cfg.backend || "attention backend"})`;
    if (!hh) {
      band("model", "model code (untouched)", `step ${rec.step}: ${esc(away)}`);
      band("hook", "metadata path + DA hook", "");
      band("kernel", kernel, "");
      return;
    }
    const seq = hh.seq_len, q = hh.query_len, attn = hh.attn_seq_len;
    band("model", "model code (untouched)", `forward of ${q} new token${q !== 1 ? "s" : ""} at `
      + `positions ${seq - q}…${seq - 1}; the model never sees DA`);
    band("hook", "metadata path + DA hook", `directive <b>${esc(directiveText(hh.directive))}</b>: `
      + `staged row ${hh.blocks_total} blocks → kernel row ${hh.blocks_read} blocks; seq_len ${seq}`
      + ` → ${attn}; slot mapping keeps the committed row`, hh.blocks_read < hh.blocks_total);
    band("kernel", kernel, `reads ${hh.blocks_read} of ${hh.blocks_total} blocks (${attn} tokens)`);
  }

  _row(hh, dt, away) {
    const v = this.view;
    if (!hh) {
      this.rowTitle.textContent = `${this.req}: ${away}, so no row to read`;
      this.held.draw([], v.slots); this.reads.draw([], v.slots); this.rowKey = null;
      return;
    }
    const total = hh.blocks_total, staged = hh.staged_row || new Int32Array(0), kept = hh.kept;
    const keptSet = new Set(kept);
    const slots = v.fit(Math.max(total, staged.length));
    this.rowTitle.innerHTML = `<b>${esc(v.req)}'s row</b>: ${kept.length} of ${total} logical blocks read`;
    const key = `${total}|${slots}|${kept.length}|${kept[0]}|${kept[kept.length - 1]}|${hh.mode}|${staged.length}|${hh.partial.size}`;
    if (key === this.rowKey) return;
    this.rowKey = key;
    const blk = (j, read) => {
      const c = read ? v.color(j) : MASKED;
      return { fill: c, ink: read ? ink(c) : "#666", id: j < staged.length ? staged[j] : null, lb: j, read,
               partial: read && hh.partial.has(j) };
    };
    const held = [];
    for (let j = 0; j < total; j++) held.push(blk(j, keptSet.has(j)));
    const region = (j) => v.region(j);
    this.held.draw(held, slots, { labels: "regions", region });
    this.reads.draw(Array.from(kept, (j) => blk(j, true)), slots, { dt, labels: "regions", region });
  }

  // ▶ following a live engine: the engine may be the one step ahead it is asked for
  _following() { const p = this.player; return !!(p && p.playing && p.follow && p.live); }

  _steer() {
    const n = this.run.length, latest = this.run.steps[n - 1], shown = this.run.steps[this.i];
    const atEnd = this.i >= n - 1 || (this._following() && this.i >= n - 2);
    this.steer.refresh(this.session.state.steer, atEnd, shown && shown.step, latest && latest.step);
  }

  // the page's step is the engine's, give or take the one step it has asked for: ▶ following,
  // or paused at its last step while that step is on its way (the kernel writes the tag at the
  // engine's next token either way)
  _atEngine() {
    return this._following() || (this.i >= this.run.length - 1 && this.session.pending >= 0);
  }

  _marks() {
    if (!this.held) return;
    const p = this.hub.block;
    for (const st of [this.held, this.reads]) {
      st.clearMarks();
      if (p !== null && p !== undefined) st.mark((b) => b.id === p, HL, "da-pulse", 2);
    }
  }

  _hover(e) {
    const box = this.svg.getBoundingClientRect(), y = e.clientY - box.top;
    for (const st of [this.held, this.reads]) {
      if (y < st.y - 3 || y > st.y + st.h + 3) continue;
      const j = st.slotAt(e.clientX), b = j === null ? null : st.blocks[j];
      if (!b || b.id === null) break;
      showTip(e, `logical ${b.lb} (${this.view.region(b.lb)}) → physical ${b.id}: `
        + (b.read ? "read" : "masked, not read"));
      this.hub.set(b.id, "dahook");
      return;
    }
    hideTip();
  }

}

// Why the request followed has no row at step i: not added yet, or finished (its last step)
function absent(ser, i, req) {
  const idx = ser.idx;
  if (!idx.length || i < idx[0]) return `${req} has not run yet`;
  if (i > idx[idx.length - 1]) {
    return `${req} has finished (its last step was step ${ser.steps[ser.steps.length - 1]})`;
  }
  return `${req} was not scheduled this step`;
}

// Why this page can't steer, in words true where it is shown (null: it can)
export function steerOff(pcfg, cfg) {
  if (pcfg.saved) {
    return "this view was saved with the notebook and the kernel that ran it is gone: "
      + "run the cells again (Run All) to start an engine and steer it";
  }
  if (!pcfg.kernel) {
    return "a page exported from a recorded run: its steps ran when it was written and there "
      + "is no engine behind it; steering is in the notebooks (make lab), where a lesson's "
      + "first cell starts one";
  }
  if (cfg.steer) return null;
  if (pcfg.live && !pcfg.has_lab) {
    return "the server's trace: these steps ran in the server's worker, which this notebook "
      + "only reads; steering is in 04 and the tour, where the engine runs in this kernel";
  }
  return "a recording: it replays steps that already ran, so there is nothing to steer "
    + "(a lesson with LIVE = True starts an engine you can steer)";
}

// core/tags.py's str(Directive): runs of 3+ chunks as ranges ("focus C1-C4,C7")
export function directiveText(d) {
  if (!d) return "?";
  if (d.mode === "local" && d.recent != null) return `local ${d.recent}`;
  if (d.mode !== "focus") return d.mode;
  const ids = [...new Set(d.chunks || [])].sort((a, b) => a - b), parts = [];
  for (const c of ids) {
    const r = parts[parts.length - 1];
    if (r && r[1] === c - 1) r[1] = c; else parts.push([c, c]);
  }
  const out = parts.flatMap(([a, b]) => (b - a >= 2 ? [`C${a}-C${b}`]
    : Array.from({ length: b - a + 1 }, (_, k) => `C${a + k}`)));
  return `focus ${out.join(",")}`;
}
