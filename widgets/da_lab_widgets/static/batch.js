// Panel (e) of diagram 2, when the diagram is made with batch=True: every request of the step,
// one staged row each (logical block j in column j), coloured by DA region where that request's
// kernel reads the block and grey where it is hidden. A physical block that stands in more than
// one row is one block of the KV cache referenced by several requests (prefix caching shares a
// prompt's full blocks): a dark bar under it; the row's label counts them, and hover names the
// rows that hold the block. Every
// number is the step's: staged_row and kept_logical of each request (store.js).

import { s, SMALL } from "./dom.js";
import { MASKED, ink, RequestView, SHARED } from "./look.js";
import { Strip } from "./strip.js";

const ROW_H = 18, PITCH = 26, HEAD = 20;

// {physical block: the requests whose staged row holds it} for one step
export function holders(rec) {
  const out = new Map();
  for (const hh of rec.requests) {
    if (!hh.hooked || !hh.staged_row) continue;
    for (const p of new Set(hh.staged_row)) {
      if (!out.has(p)) out.set(p, []);
      out.get(p).push(hh.req);
    }
  }
  return out;
}

export class BatchRows {
  constructor(svg, run, { y, left, w }) {
    Object.assign(this, { run, y, left, w });
    this.g = s("g", { class: "da-batch", "data-batch": "" }, svg);
    this.views = new Map();
    this.strips = [];
    this.height = HEAD;
    this.shared = new Map();
  }
  view(req) {
    if (!this.views.has(req)) this.views.set(req, new RequestView(this.run, req));
    return this.views.get(req);
  }
  // draws step `rec`'s rows; returns the panel's height
  draw(rec) {
    this.g.replaceChildren();
    const rows = rec.requests.filter((hh) => hh.hooked && hh.staged_row);
    this.shared = holders(rec);
    const nShared = [...this.shared.values()].filter((r) => r.length > 1).length;
    s("text", { x: 4, y: this.y + 12, "font-size": 12, "font-weight": "bold",
                text: `(e) this step's batch: ${rows.length} rows; ${nShared} physical blocks `
                  + "are in more than one row" }, this.g);
    const slots = Math.max(1, ...rows.map((hh) => hh.staged_row.length));
    this.strips = rows.map((hh, k) => {
      const y = this.y + HEAD + k * PITCH, v = this.view(hh.req), kept = new Set(hh.kept);
      const mode = (hh.mode || "global").toUpperCase();
      const what = hh.directive && hh.directive.chunks && hh.directive.chunks.length
        ? ` C${hh.directive.chunks.join(",C")}` : "";
      const label = s("text", { x: 4, y: y + 13, "font-size": SMALL }, this.g);
      const st = new Strip(this.g, { x: this.left, y, w: this.w, h: ROW_H, name: `batch-${k}` });
      const blocks = Array.from(hh.staged_row, (p, j) => {
        const fill = kept.has(j) ? v.color(j) : MASKED;
        return { fill, ink: ink(fill), id: p, lb: j, req: hh.req, read: kept.has(j) };
      });
      st.draw(blocks, slots, {});
      st.g.setAttribute("data-req", hh.req);
      const n = this._bars(st, y);
      label.textContent = `${hh.req} · ${mode}${what}${n ? ` · ${n} shared` : ""}`;
      return st;
    });
    this.height = HEAD + rows.length * PITCH;
    return this.height;
  }
  // a bar under each run of blocks this row shares with other rows; returns how many it shares
  _bars(st, y) {
    const c = st.cell(), bl = st.blocks, many = (j) => (this.shared.get(bl[j].id) || []).length;
    let j = 0, n = 0;
    while (j < bl.length) {
      if (many(j) < 2) { j++; continue; }
      let k = j + 1;
      while (k < bl.length && many(k) === many(j)) k++;
      s("rect", { x: st.x + j * c, y: y + ROW_H + 1, width: Math.max(2, (k - j) * c - 1), height: 3,
                  fill: SHARED, "data-shared": `${j},${k},${many(j)}`, "data-of": bl[j].req }, this.g);
      n += k - j;
      j = k;
    }
    return n;
  }
  mark(p, color, cls) {
    for (const st of this.strips) {
      st.clearMarks();
      if (p !== null && p !== undefined) st.mark((b) => b.id === p, color, cls, 2);
    }
  }
  // {block, tip} under the pointer, or null
  at(clientX, clientY, box) {
    const y = clientY - box.top;
    for (const st of this.strips) {
      if (y < st.y - 2 || y > st.y + st.h + 4) continue;
      const j = st.slotAt(clientX), b = j === null ? null : st.blocks[j];
      if (!b) return null;
      const who = this.shared.get(b.id) || [];
      const v = this.view(b.req);
      return { block: b.id, tip: `${b.req}: logical ${j} (${v.region(j)}) → physical ${b.id}, `
        + `${b.read ? "read by its kernel" : "hidden from its kernel"}`
        + (who.length > 1 ? `; physical ${b.id} is in ${who.length} rows: ${who.join(", ")}` : "") };
    }
    return null;
  }
  describe(p) {
    const who = this.shared.get(p) || [];
    return who.length > 1 ? `; in ${who.length} rows of this step (${who.join(", ")})` : "";
  }
}
