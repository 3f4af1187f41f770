// The run in the browser: every step the page has been sent, decoded once from the kernel's
// packets (widgets/da_lab_widgets/packets.py writes them), and what the diagrams read from it:
// a request's derived numbers, the physical KV map after any step, one request's series.
// Steps are only appended; stepping back, scrubbing and replay read what is here.

import { pageState } from "./pagestate.js";

const DEC = new TextDecoder();

function runsOut(data, at, n) {
  // (first, count) pairs back into values; -1 repeats (vLLM's padding slot)
  let len = 0;
  for (let k = 1; k < n; k += 2) len += data[at + k];
  const out = new Int32Array(len);
  let j = 0;
  for (let k = 0; k < n; k += 2) {
    const v = data[at + k], c = data[at + k + 1];
    for (let t = 0; t < c; t++) out[j++] = v === -1 ? -1 : v + t;
  }
  return out;
}

function bytesOf(buf) {
  if (buf instanceof Uint8Array) return buf;
  if (ArrayBuffer.isView(buf)) return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
  return new Uint8Array(buf);
}

export function readPacket(buf) {
  const bytes = bytesOf(buf);
  if (DEC.decode(bytes.subarray(0, 4)) !== "DAL1") throw new Error("not a da_lab packet");
  const len = new DataView(bytes.buffer, bytes.byteOffset + 4, 4).getUint32(0, true);
  const head = JSON.parse(DEC.decode(bytes.subarray(8, 8 + len)));
  const data = new Int32Array(bytes.slice(8 + len).buffer);   // a copy: aligned
  return { head, data };
}

// Reads a packet's arrays in the order packets.py wrote them.
class Cursor {
  constructor(data) { this.data = data; this.at = 0; }
  raw(n) { const a = this.data.slice(this.at, this.at + n); this.at += n; return a; }
  runs(n) { const a = runsOut(this.data, this.at, n); this.at += n; return a; }
}

function kvOf(o, cur) {
  const kv = { assign: {}, free: [], cached: [], uncached: [] };
  if (!o) return kv;
  for (const [owners, n] of o.as || []) for (const b of cur.runs(n)) kv.assign[b] = owners;
  for (const [key, short] of [["free", "fr"], ["cached", "ca"], ["uncached", "un"]]) {
    if (o[short]) kv[key] = Array.from(cur.runs(o[short]));
  }
  return kv;
}

// ---- a request's derived numbers (core/record.py RequestStep's properties) -------------------
// RequestStep owns them; this is a checked copy. tests/test_packets.py derives every property of
// RequestStep here, over every shipped trace and variants of it, and fails on any difference or
// on a field one side has and the other lacks. A copy, not sent in packets: kernel_row and
// read_row are whole rows every step, where a decode step now sends no block id at all.
function derive(h) {
  if (!h.hooked) return h;
  const total = Math.ceil(h.seq_len / h.block_size);
  const kept = h.kept_logical || Int32Array.from({ length: total }, (_, j) => j);
  h.blocks_total = total;
  h.kept = kept;
  h.blocks_kept = kept.length;
  h.attn_seq_len = h.seq_len - (total - kept.length) * h.block_size;
  h.blocks_read = h.built_seq_len != null ? Math.ceil(h.built_seq_len / h.block_size)
    : kept.length;
  h.mode = h.directive ? h.directive.mode : null;
  // kept blocks that also hold hidden tokens (the paper's unpadded chunks, rounded outward)
  h.partial = new Set(h.partial_logical || []);
  let kernel = h.staged_row;
  if (h.staged_row && h.kept_logical) kernel = Int32Array.from(kept, (lb) => h.staged_row[lb]);
  h.kernel_row = kernel;
  h.read_row = h.built_row || kernel;
  return h;
}

export class Run {
  constructor(header) {
    const prov = header.provenance || {};
    this.header = header;
    this.blockSize = prov.block_size;
    this.numBlocks = prov.num_blocks;
    this.steps = [];
    this.added = new Map();            // request id -> its `added` entry
    this.listeners = new Set();
    this._rows = new Map();            // decoding: each request's last staged row
    this._carry = new Map();
    this._md = {};
    this._init = { assign: {}, free: [], cached: [], uncached: [] };
    this._kv = null;
    this._series = new Map();
  }
  get length() { return this.steps.length; }
  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }

  // A packet's steps, if they continue the run; returns "ok", "old" (already here) or "gap".
  append(buf) {
    const { head, data } = readPacket(buf);
    if (head.from > this.steps.length) return "gap";
    if (head.from < this.steps.length) return head.steps.length ? "old" : "ok";
    const cur = new Cursor(data);
    if (head.from === 0 && head.init) this._init = kvOf(head.init, cur);
    for (const s of head.steps) this._push(this._step(s, cur));
    for (const fn of this.listeners) fn(this);
    return "ok";
  }

  _step(s, cur) {
    const requests = s.q.map((r) => this._request(r, cur));
    let md = null;
    if (s.md) {
      const m = { ...this._md, ...s.md };
      this._md = m;
      md = { query_start_loc: cur.raw(m.q), seq_lens: cur.raw(m.sl), slot_mapping: cur.runs(m.sm),
             block_table_shape: m.bt, max_seq_len: m.mx, backend: m.be, runner: m.rn };
    }
    return { step: s.s, wall_s: s.w, hook_us: s.hu, requests, metadata: md,
             kv: kvOf(s.kv, cur), added: s.ad || [], warnings: s.wn || [] };
  }

  _request(r, cur) {
    const h = { req: r.id, hooked: r.sl !== undefined, new_token_ids: null, new_text: null,
                finished: null };
    if (h.hooked) {
      const c = { ...(this._carry.get(r.id) || {}), ...pick(r, ["row", "bs", "d"]) };
      this._carry.set(r.id, c);
      Object.assign(h, { row: c.row, block_size: c.bs, directive: c.d, seq_len: r.sl,
                         query_len: r.ql, n_output_seen: r.no, tokens_unseen: r.tu || 0,
                         tag_buffer: r.tb || "", events: r.ev || [], staged_row: null,
                         kept_logical: null, partial_logical: null, built_row: null,
                         built_seq_len: r.bl ?? null, groups: null });
      if (r.sr) {
        const prev = this._rows.get(r.id);
        const fresh = cur.raw(r.sr[1]);
        let row;
        if (prev && r.sr[0] === prev.length && r.sr[1] === 0) row = prev;     // unchanged
        else {
          row = new Int32Array(r.sr[0] + r.sr[1]);
          if (r.sr[0]) row.set(prev.subarray(0, r.sr[0]));
          row.set(fresh, r.sr[0]);
        }
        this._rows.set(r.id, row);
        h.staged_row = row;
      }
      if (r.kl !== undefined) h.kept_logical = cur.runs(r.kl);
      if (r.pl !== undefined) h.partial_logical = cur.runs(r.pl);
      if (r.br !== undefined) h.built_row = cur.raw(r.br);
      if (r.gr !== undefined) {     // a hybrid model's other KV-cache groups (core/group_rows.py)
        h.groups = r.gr.map(([group, kind, bs, window, n]) => ({
          group, kind, block_size: bs, window, row: cur.raw(n) }));
      }
    }
    if (r.nt !== undefined) {
      h.new_token_ids = r.nt; h.new_text = r.tx; h.finished = r.f;
    }
    return derive(h);
  }

  _push(rec) {
    for (const a of rec.added) if (!this.added.has(a.req)) this.added.set(a.req, a);
    this.steps.push(rec);
  }

  request(i, req) {
    const rec = this.steps[i];
    return rec ? rec.requests.find((h) => h.req === req) || null : null;
  }

  firstRequest(upto = this.steps.length - 1) {
    for (let i = 0; i <= upto; i++) for (const a of this.steps[i].added) return a.req;
    return null;
  }

  // ---- the physical KV map after step i (i = -1: when the run began) ---------------------
  kvAt(i) {
    if (!this._kv) this._kv = new KVReplay(this);
    return this._kv.at(i);
  }

  series(req) {
    let s = this._series.get(req);
    if (!s) { s = new Series(this, req); this._series.set(req, s); }
    s.scan();
    return s;
  }
}

function pick(o, keys) {
  const out = {};
  for (const k of keys) if (o[k] !== undefined) out[k] = o[k];
  return out;
}

// {owners index per block, cached per block}; owner lists interned (index 0: free).
const CHECKPOINT = 32;

class KVReplay {
  constructor(run) {
    this.run = run;
    this.sets = [[]];
    this.index = new Map([["", 0]]);
    const n = Math.max(1, run.numBlocks || 1);
    this.base = { owners: new Int32Array(n), cached: new Uint8Array(n) };
    this._apply(this.base, run._init);
    this.cur = copyKV(this.base);
    this.atIdx = -1;
    this.checkpoints = new Map();
  }
  owners(code) { return this.sets[code]; }
  _code(list) {
    const key = list.join("\u0000");
    let c = this.index.get(key);
    if (c === undefined) { c = this.sets.length; this.sets.push(list.slice()); this.index.set(key, c); }
    return c;
  }
  _apply(st, kv) {
    const grow = (b) => {
      if (b < st.owners.length) return;
      const n = Math.max(b + 1, st.owners.length * 2);
      const o = new Int32Array(n); o.set(st.owners); st.owners = o;
      const c = new Uint8Array(n); c.set(st.cached); st.cached = c;
    };
    for (const b in kv.assign) { grow(+b); st.owners[+b] = this._code(kv.assign[b]); }
    for (const b of kv.free) { grow(b); st.owners[b] = 0; }
    for (const b of kv.cached) { grow(b); st.cached[b] = 1; }
    for (const b of kv.uncached) { grow(b); st.cached[b] = 0; }
  }
  at(i) {
    if (i < this.atIdx) {
      let k = -1;
      for (const c of this.checkpoints.keys()) if (c <= i && c > k) k = c;
      this.cur = copyKV(k >= 0 ? this.checkpoints.get(k) : this.base);
      this.atIdx = k;
    }
    while (this.atIdx < i) {
      this.atIdx += 1;
      this._apply(this.cur, this.run.steps[this.atIdx].kv);
      if (this.atIdx % CHECKPOINT === CHECKPOINT - 1) this.checkpoints.set(this.atIdx, copyKV(this.cur));
    }
    return { owners: this.cur.owners, cached: this.cur.cached, sets: this.sets };
  }
}

function copyKV(st) { return { owners: st.owners.slice(), cached: st.cached.slice() }; }

// One request's per-step numbers and stream text across the run (diagram 4), gathered once per
// step as steps arrive.
export class Series {
  constructor(run, req) {
    Object.assign(this, { run, req, idx: [], steps: [], read: [], total: [], textEnd: [],
                          parts: [], tags: [], n: 0, len: 0 });
  }
  scan() {
    for (let k = this.n; k < this.run.steps.length; k++) {
      const h = this.run.request(k, this.req);
      if (h && h.hooked) {
        this.idx.push(k); this.steps.push(this.run.steps[k].step);
        this.read.push(h.blocks_read); this.total.push(h.blocks_total);
        for (const e of h.events) {
          if ((e.kind === "tag_trapped" || e.kind === "malformed_tag") && e.text) {
            this.tags.push([k, ...this._span(this.parts.join(""), e), e.kind]);
          }
        }
      }
      const text = (h && h.new_text) || "";
      this.parts.push(text);
      this.len += text.length;
      this.textEnd.push(this.len);
    }
    this.n = this.run.steps.length;
  }
  _span(text, e) {
    // where a trapped tag sits: the event's offset is just past its last character
    const t = e.text, end = Number(e.offset || 0);
    if (text.slice(Math.max(0, end - t.length), end) === t) return [end - t.length, end];
    const at = text.lastIndexOf(t);
    return at >= 0 ? [at, at + t.length] : [0, 0];
  }
  upto(i) {            // how many per-step entries belong to steps <= i
    let lo = 0, hi = this.idx.length;
    while (lo < hi) { const m = (lo + hi) >> 1; if (this.idx[m] <= i) lo = m + 1; else hi = m; }
    return lo;
  }
  text(i) { return this.parts.slice(0, i + 1).join(""); }
}

// ---- cross-diagram hover: one hovered physical block per group, for every diagram on the page
// (a group is a Highlight's key: the diagrams of one player, or of players that share it).
export function hub(key) {
  const hubs = pageState().hubs;
  let h = hubs.get(key);
  if (!h) {
    h = { block: null, source: "", listeners: new Set(),
          set(block, source = "") {
            if (block === this.block) return;
            this.block = block; this.source = source;
            for (const fn of this.listeners) fn(block, source);
          },
          on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); } };
    hubs.set(key, h);
  }
  return h;
}
