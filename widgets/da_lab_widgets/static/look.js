// What every diagram that colours blocks shares: the region colours, a request's view (the
// region of each logical block, from the DA layout its `added` entry carries: core/layout.py's
// region_of), owner colours for the physical cache, and the ink that reads on a colour.

import { pageState } from "./pagestate.js";

export const SCAFFOLD = "#e09f3e";    // scaffold head, incl. the attention sink (block 0)
export const TAIL = "#f2c57c";        // scaffold tail: the question (always kept, like the head)
export const RESPONSE = "#2a9d8f";
export const MASKED = "#d0d0d0";      // hidden from the kernel this step
export const FREE = "#eeeeee";
export const CACHED = "#f3e9c6";      // free but still holding a prefix-cache hash
export const HL = "#111111";          // the shared highlight's outline
export const FLASH = "#ff5400";       // a block append_row added this step
export const PACKET = "#ff5400";
export const HOOK = "#d62828";
export const SHARED = "#5b2a86";      // one physical block in several requests' rows
export const OWNERS = ["rgb(102,194,165)", "rgb(252,141,98)", "rgb(141,160,203)",
  "rgb(231,138,195)", "rgb(166,216,84)", "rgb(255,217,47)", "rgb(229,196,148)",
  "rgb(179,179,179)"];            // plotly's Set2
const BLUES = [[247, 251, 255], [222, 235, 247], [198, 219, 239], [158, 202, 225],
  [107, 174, 214], [66, 146, 198], [33, 113, 181], [8, 81, 156], [8, 48, 107]];

function blue(t) {
  const x = Math.min(Math.max(t, 0), 1) * (BLUES.length - 1), k = Math.min(Math.floor(x), 7);
  const f = x - k, a = BLUES[k], b = BLUES[k + 1];
  return `rgb(${a.map((v, j) => Math.round(v + f * (b[j] - v))).join(", ")})`;
}

// n distinct blues where neighbours always contrast: odd chunks from the darker part of the
// ramp, even chunks from the lighter part (hiding C3 but not C4 shows at a glance).
export function chunkColors(n) {
  const half = Math.floor((n + 1) / 2), out = [];
  for (let k = 0; k < n; k++) {
    const rank = Math.floor(k / 2) / Math.max(half - 1, 1);
    out.push(blue(k % 2 === 0 ? 0.55 + 0.3 * rank : 0.18 + 0.25 * rank));
  }
  return out;
}

export function ink(color) {
  const inks = pageState().inks;
  let out = inks.get(color);
  if (out === undefined) { out = inkOf(color); inks.set(color, out); }
  return out;
}

function inkOf(color) {
  const m = /^#([0-9a-f]{6})$/i.exec(color) || /^rgb\(([^)]+)\)$/.exec(color);
  if (!m) return "#111";
  const [r, g, b] = color.startsWith("#")
    ? [0, 2, 4].map((k) => parseInt(m[1].slice(k, k + 2), 16)) : m[1].split(",").map(Number);
  return 0.299 * r + 0.587 * g + 0.114 * b < 140 ? "white" : "#111";
}

export const SHORT = { scaffold: "S", prompt: "P", tail: "Q", response: "R" };

// The request a diagram follows, as its `added` entry describes it.
export class RequestView {
  constructor(run, req) {
    const added = run.added.get(req) || {};
    this.req = req;
    this.layout = added.layout || null;
    const bs = run.blockSize;
    this.promptLen = Number(added.prompt_len || (this.layout ? this.layout.prompt_len : 0));
    const need = Math.ceil((this.promptLen + Number(added.max_tokens || 0)) / bs);
    this.slots = Math.max(1, need ? Math.min(need, run.numBlocks) : run.numBlocks);
    this.blockSize = bs;
    const lay = this.layout;
    // chunk token spans [a, b): the paper's unpadded chunks, or the card's whole blocks
    this.spans = !lay ? [] : lay.chunk_spans || (() => {
      const out = [];
      let b = lay.head_blocks;
      for (const n of lay.chunk_blocks) { out.push([b * bs, (b + n) * bs]); b += n; }
      return out;
    })();
    this.nChunks = this.spans.length;
    this.chunkColors = chunkColors(this.nChunks);
  }
  // core/layout.py Layout.region_of: the first chunk holding any token of block j, else
  // scaffold before the chunks, tail after them in the prompt, response past it
  region(j) {
    const lay = this.layout, bs = this.blockSize;
    if (!lay) return j * bs < this.promptLen ? "prompt" : "response";
    for (let c = 0; c < this.spans.length; c++) {
      const [a, b] = this.spans[c];
      if (a < (j + 1) * bs && j * bs < b) return `C${c + 1}`;
    }
    if (this.spans.length && j * bs < this.spans[0][0]) return "scaffold";
    return j * bs < lay.prompt_len ? "tail" : "response";
  }
  color(j) {
    const r = this.region(j);
    if (r === "scaffold" || r === "prompt") return SCAFFOLD;
    if (r === "tail") return TAIL;
    if (r === "response") return RESPONSE;
    return this.chunkColors[Number(r.slice(1)) - 1];
  }
  // grow the scale when a row outgrows what `added` promised (never shrinks: no jumps)
  fit(n) { if (n > this.slots) this.slots = n; return this.slots; }
}

export function ownerColor(run, owner) {
  const m = (run._ownerColors ??= new Map());
  if (!m.has(owner)) m.set(owner, OWNERS[m.size % OWNERS.length]);
  return m.get(owner);
}
