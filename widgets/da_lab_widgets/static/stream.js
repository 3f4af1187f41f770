// Diagram 4's text parts: the GLOBAL / FOCUS / LOCAL lamps, the hook's tag buffer (it fills
// character by character while a step plays, and flashes when a tag is trapped at '>'), the
// response stream (trapped tags marked, the newest token at the bottom, always in view), and
// the "steer it yourself" panel, whose buttons the kernel answers (player.py / steering.py).

import { esc, h } from "./dom.js";

export const LAMP = { global: "#2a9d8f", focus: "#1f6fb4", local: "#e76f51" };
const MODES = ["global", "focus", "local"];

export function visible(text) {
  // control characters as their visible pictures (a random-weight model writes some)
  let out = "";
  for (const ch of text) {
    const o = ch.codePointAt(0);
    if (ch === "\n") out += "↵\n";
    else if (o < 0x20) out += String.fromCodePoint(0x2400 + o);
    else if (o === 0x7f) out += "␡";
    else out += esc(ch);
  }
  return out;
}

export class Lamps {
  constructor(parent) {
    this.el = h("div", { class: "da-lamps", title: "the mode the hook applied this step" }, parent);
    // indicators, not buttons: a plain label first (the buttons are under "steer it yourself")
    this.caption = h("span", { class: "da-caption", text: "mode this step:" }, this.el);
    this.lamps = {};
    for (const m of MODES) {
      const w = h("span", { class: `da-lamp-wrap da-lamp-${m}`, "data-mode": m }, this.el);
      h("span", { class: "da-lamp" }, w);
      h("span", { class: "da-lamp-label", text: m.toUpperCase() }, w);
      this.lamps[m] = w;
    }
  }
  // no mode to show: the request is not in this step (why, in words)
  away(why) {
    this.el.classList.toggle("da-lamps-away", !!why);
    this.el.title = why ? `no lamp: ${why}` : "the mode the hook applied this step";
    this.caption.textContent = why ? "mode this step: none, not in this step" : "mode this step:";
  }
  set(mode) {
    for (const m of MODES) {
      const on = m === mode, w = this.lamps[m];
      w.classList.toggle("da-lamp-on", on);
      w.style.color = LAMP[m];
      w.firstChild.style.background = on ? LAMP[m] : "#f0f0f0";
      w.firstChild.style.borderColor = on ? LAMP[m] : "#bbb";
    }
  }
}

export class TagBuffer {
  constructor(parent) {
    const box = h("div", { class: "da-buffer-box" }, parent);
    h("div", { class: "da-caption", text: "tag buffer (hook, before this step's token)" }, box);
    this.el = h("div", { class: "da-tag-buffer" }, box);
  }
  // buf: what the hook held; trapped: the tag trapped this step; from: the buffer one step
  // earlier (the new characters are typed out over dt ms)
  set(buf, trapped, from, dt) {
    clearInterval(this.timer);
    const el = this.el;
    el.classList.toggle("da-flash", !!trapped);
    if (trapped) { el.innerHTML = `<span class="da-tag_trapped">${visible(trapped)}</span> trapped at '&gt;'`; return; }
    const paint = (t) => { el.innerHTML = t ? visible(t) : '<span style="color:#999">(empty)</span>'; };
    if (!dt || !buf.startsWith(from) || buf.length <= from.length) { paint(buf); return; }
    let n = from.length;
    paint(buf.slice(0, n));
    const every = Math.max(12, dt / (buf.length - n));
    this.timer = setInterval(() => {
      n += 1;
      paint(buf.slice(0, n));
      if (n >= buf.length) clearInterval(this.timer);
    }, every);
  }
}

// The response so far, with the marks: trapped tags, malformed ones, the tag being written.
const TITLES = {
  tag_trapped: "trapped: the hook caught it at '>'; the mode changes the step after",
  malformed_tag: "malformed: it never closed (a second '<' came first, e.g. the director's tag "
    + "cut into one the model had begun), so it changed nothing",
  pending: "being written: in the hook's tag buffer",
};
export function streamHtml(text, tags, i, prevEnd, buf) {
  const marks = tags.filter(([k, a, b]) => k <= i && b > a).map(([, a, b, kind]) => [a, b, kind]);
  if (buf && text.slice(0, prevEnd).endsWith(buf)) marks.push([prevEnd - buf.length, prevEnd, "pending"]);
  marks.sort((x, y) => x[0] - y[0]);
  let out = "", at = 0;
  for (const [a, b, kind] of marks) {
    if (a < at) continue;
    const title = TITLES[kind] ? ` title="${TITLES[kind]}"` : "";
    out += piece(text, at, a, prevEnd) + `<span class="da-${kind}"${title}>${visible(text.slice(a, b))}</span>`;
    at = b;
  }
  return out + piece(text, at, text.length, prevEnd);
}

function piece(text, a, b, newFrom) {
  // the part this step added gets a light background
  if (b <= newFrom) return visible(text.slice(a, b));
  const m = Math.max(a, newFrom);
  return visible(text.slice(a, m)) + `<span class="da-new">${visible(text.slice(m, b))}</span>`;
}

export class Steering {
  constructor(parent, session, live) {
    this.session = session;
    this.live = live;
    this.el = h("div", { class: "da-steer-panel", "data-da-part": "steer" }, parent);
    const row = h("div", { class: "da-steer" }, this.el);
    h("b", { text: "steer it yourself:" }, row);
    this.buttons = {};
    for (const m of MODES) {
      this.buttons[m] = h("button", { class: `da-steer-${m}`, "data-da-steer": m, text: m.toUpperCase(),
                                      on: { click: () => this.press(m) } }, row);
    }
    this.chips = h("div", { class: "da-steer da-chips", title: "FOCUS on these chunks: tick one or more" }, this.el);
    this.status = h("div", { class: "da-steer-status" }, this.el);
    this.off = h("div", { class: "da-steer-off" }, this.el);
    this.picked = null;
  }
  // the kernel's view of each button (steering.py) and what is on screen
  refresh(st, atEnd, shown, latest) {
    this.st = st;
    const names = (st && st.chunks) || [];
    // the kernel's ticks when the request followed changes (a new request starts with none)
    if (st && st.req !== this.req) { this.req = st.req; this.picked = new Set(st.picked || []); }
    this.picked ??= new Set();
    if (this.chips.childElementCount !== names.length + 1) {
      this.chips.replaceChildren(h("span", { text: "focus on (tick one or more):" }));
      for (const [k, name] of names.entries()) {
        const chip = h("label", { class: "da-chip" }, this.chips);
        const box = h("input", { type: "checkbox", value: k + 1, "data-da-chunk": k + 1,
                                 on: { change: () => this.pick(k + 1, box.checked) } }, chip);
        chip.append(name);
      }
    }
    for (const b of this.chips.querySelectorAll("input")) b.checked = this.picked.has(Number(b.value));
    let why = null;
    if (!this.live) why = this.offWhy || "a recording: there is no engine here to steer";
    else if (!st) why = "waiting for the kernel";
    else if (st.why) why = st.why;
    else if (!atEnd) {
      why = `you are looking at step ${shown}, the engine is at step ${latest}: a tag is written `
        + "at the engine's next token, so move the slider to the last step first";
    }
    const reasons = {};
    for (const m of MODES) {
      let r = why || (st.reasons || {})[m] || null;
      if (!r && m === "focus" && !this.picked.size) r = "pick one or more chunks to focus on";
      reasons[m] = r;
      this.buttons[m].disabled = !!r;
      this.buttons[m].title = r || `write ${(st.tags || {})[m] || m} into the response from the engine's next token`;
    }
    for (const b of this.chips.querySelectorAll("input")) b.disabled = !!why;
    this.off.textContent = why ? `steering is off: ${why}`
      : MODES.filter((m) => reasons[m]).map((m) => `${m.toUpperCase()} is off: ${reasons[m]}`).join(" · ");
    // a press's outcome belongs to the engine's step it was made at: on an earlier step (the
    // slider dragged back) it is said as what happens later
    const later = !!st && st.status_step != null && shown != null && shown < st.status_step;
    const text = st && st.status !== undefined
      ? (later ? `later, at step ${st.status_step} (after the step on screen): ${st.status}`
        : st.status) : this.lastStatus;
    if (text !== undefined && text !== this.lastStatus) {
      this.lastStatus = text;
      this.status.textContent = text;
    }
    this.status.classList.toggle("da-later", later);
  }
  pick(k, on) {
    if (on) this.picked.add(k); else this.picked.delete(k);
    this.session.send({ type: "pick", chunks: [...this.picked].sort((a, b) => a - b) });
  }
  press(m) {
    // the step on screen; while ▶ follows the engine it may be one step behind the engine's
    const { i, following } = this.onPress ? this.onPress() : { i: null, following: false };
    this.status.textContent = `asking the engine to write ${m.toUpperCase()}…`;
    this.session.send({ type: "steer", mode: m, chunks: [...this.picked].sort((a, b) => a - b),
                        i, following });
  }
}
