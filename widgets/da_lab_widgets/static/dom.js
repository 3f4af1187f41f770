// Small DOM helpers: SVG and HTML elements, text measured with the page's own font, wrapping,
// the tooltip every diagram shares, and the animation clock (a step's animations last a part of
// the step's time, and none while scrubbing).

import { pageState } from "./pagestate.js";

export const SVGNS = "http://www.w3.org/2000/svg";
export const FONT = 12;                     // body text; nothing on screen is under 11 px
export const SMALL = 11;
const FAMILY = "system-ui, -apple-system, 'DejaVu Sans', sans-serif";
export const MONO = "'DejaVu Sans Mono', ui-monospace, monospace";

function put(e, attrs, parent) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k === "html") e.innerHTML = v;
    else if (k === "on") for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else e.setAttribute(k, v === true ? "" : v);
  }
  if (parent) parent.appendChild(e);
  return e;
}

export function s(tag, attrs, parent) { return put(document.createElementNS(SVGNS, tag), attrs, parent); }
export function h(tag, attrs, parent) { return put(document.createElement(tag), attrs, parent); }

export function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }

export function esc(t) {
  return String(t ?? "").replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                         '"': "&quot;" })[c]);
}

export function textWidth(t, size = FONT, weight = "normal", family = FAMILY) {
  const page = pageState(), key = `${weight}|${size}|${family}|${t}`;
  let w = page.widths.get(key);
  if (w === undefined) {
    page.ctx2d ??= document.createElement("canvas").getContext("2d");
    page.ctx2d.font = `${weight} ${size}px ${family}`;
    w = page.ctx2d.measureText(t).width;
    if (page.widths.size > 20000) page.widths.clear();
    page.widths.set(key, w);
  }
  return w;
}

// Break `t` into lines no wider than `width` px: before "→", "[" or "(" first, then at spaces.
export function wrap(t, width, size = FONT, weight = "normal") {
  const out = [];
  for (const para of String(t).split("\n")) {
    const units = para.split(/ (?=→ |\[|\()/).flatMap(
      (u) => (textWidth(u, size, weight) <= width ? [u] : u.split(" ")));
    let line = "";
    for (const u of units) {
      const next = line ? `${line} ${u}` : u;
      if (line && textWidth(next, size, weight) > width) { out.push(line); line = u; }
      else line = next;
    }
    out.push(line);
  }
  return out;
}

// An SVG <text> of several lines (tspans); `lines` may hold [text, {weight, fill}] pairs.
export function lines(parent, x, y, list, attrs = {}, lh = 15) {
  const t = s("text", { x, y, ...attrs }, parent);
  list.forEach((ln, k) => {
    const [str, style] = Array.isArray(ln) ? ln : [ln, {}];
    s("tspan", { x, dy: k ? lh : 0, "font-weight": style.weight, fill: style.fill,
                 text: str }, t);
  });
  return t;
}

// ---- the tooltip: one per page, follows the mouse, gone when the mouse leaves -------------
export function showTip(ev, text) {
  const page = pageState();
  page.tip ??= h("div", { class: "da-tip" }, document.body);
  const tip = page.tip;
  tip.textContent = text;
  tip.style.display = "block";
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 8);
  const y = ev.clientY + 16 + tip.offsetHeight > window.innerHeight
    ? ev.clientY - tip.offsetHeight - 10 : ev.clientY + 16;
  tip.style.left = `${Math.max(4, x)}px`;
  tip.style.top = `${Math.max(4, y)}px`;
}
export function hideTip() { const tip = pageState().tip; if (tip) tip.style.display = "none"; }

// ---- animations: Web Animations on SVG/HTML elements, `dt` ms (0: none, e.g. scrubbing) -----
export function animate(e, frames, dt, opts = {}) {
  if (!dt || !e.animate) return null;
  return e.animate(frames, { duration: dt, easing: opts.easing || "ease-out",
                             delay: opts.delay || 0, fill: opts.fill || "none" });
}
