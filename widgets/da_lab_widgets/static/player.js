// The player: ▶ / ⏸, step −1 / +1, a timeline slider over every step the page has, speed in
// steps per second, "follow the engine" in a live run, keyboard (space, ←, →). It plays from
// the steps in the page (store.js); in a live run, at the last step it asks the kernel for the
// next one and the engine runs exactly that step. Hooks for tests and tools: the root carries
// data-da-player, data-da-step (the step on screen, an index into the run), data-da-steps
// (steps known), data-da-drawn (steps painted since the last ▶); the controls carry
// data-da-action.

import { h } from "./dom.js";

const MAX_ANIM_MS = 700;

export class Player {
  constructor(root, session, diagrams) {
    this.session = session;
    this.run = session.run;
    this.diagrams = diagrams;
    this.live = !!session.cfg.live;
    this.speed = clampSpeed(session.cfg.speed || 3);
    this.follow = this.live;
    this.i = -1;
    this.playing = false;
    this.drawn = 0;
    this.painted = -1;
    this.root = root;
    root.classList.add("da-player");
    root.setAttribute("data-da-player", "");
    root.tabIndex = 0;
    const controls = h("div", { class: "da-controls" }, root);
    this._controls(controls);
    // their height (one row, or two on a narrow screen) is where a diagram scrolled to lands;
    // 0 while JupyterLab has the output detached (a windowed notebook): kept as it was then
    this.sized = new ResizeObserver(() => {
      const px = Math.ceil(controls.getBoundingClientRect().height);
      if (px > 0) root.style.setProperty("--da-controls-h", `${px}px`);
    });
    this.sized.observe(controls);
    this.noteEl = h("div", { class: "da-player-note" }, root);
    this.board = h("div", { class: "da-diagrams" }, root);
    // a diagram off screen is drawn when it comes into view (the step on screen then), not on
    // every step: the page paints only what it shows
    this.seen = new IntersectionObserver((es) => this._seen(es), { rootMargin: "300px 0px" });
    for (const d of diagrams) {
      this.board.appendChild(d.el);
      d.visible = !!session.cfg.eager;
      if (!session.cfg.eager) this.seen.observe(d.el);
    }
    root.addEventListener("keydown", (e) => this._key(e));
    this.offRun = this.run.on(() => this._grown());
    this._grown();
    const start = session.state.go ?? (this.run.length ? 0 : -1);
    if (start >= 0) this.show(start);
    else this._counter();
    if (session.cfg.saved) {
      this.note(`saved with the notebook: the ${this.run.length} step(s) this cell had when it `
        + "was first shown. The kernel that ran it is gone: run the cells again (Run All) for a "
        + "live engine.");
    }
  }

  _controls(c) {
    const b = (action, text, title, fn) => h("button", { "data-da-action": action, title,
                                                         text, on: { click: fn } }, c);
    this.playB = b("play", "▶ play", "play (space)", () => this.play());
    this.pauseB = b("pause", "❚❚ pause", "pause (space)", () => this.pause());
    this.prevB = b("prev", "◀ −1", "one step back (←)", () => this.step(-1));
    this.nextB = b("next", "+1 ▶", "one step on (→)", () => this.step(1));
    this.scrub = h("input", { type: "range", min: 0, max: 0, value: 0, step: 1,
                              "data-da-action": "scrub", "aria-label": "step",
                              on: { input: () => this._scrubbed() } }, c);
    this.counterEl = h("span", { class: "da-step-counter" }, c);
    const sp = h("label", { class: "da-speed", text: "speed " }, c);
    this.speedIn = h("input", { type: "number", min: 1, max: 60, step: 1, value: this.speed,
                                "data-da-action": "speed", title: "steps per second (1–60)",
                                on: { change: () => this.setSpeed(this.speedIn.value) } }, sp);
    sp.append(" steps/s");
    if (this.live) {
      const f = h("label", { class: "da-follow", title: "at the last step, ▶ runs the engine "
                              + "one step per tick; off: ▶ stops at the last step" }, c);
      this.followIn = h("input", { type: "checkbox", checked: true, "data-da-action": "follow",
                                   on: { change: () => { this.follow = this.followIn.checked; } } }, f);
      f.append(" follow the engine");
      if (this.session.cfg.can_add) {
        b("new-request", "+ new request", "add a fresh request to the running engine and keep "
          + "playing", () => this.session.send({ type: "new_request" }));
      }
    }
  }

  // ---- moving ------------------------------------------------------------------------------
  show(i, { dt = 0 } = {}) {
    if (i < 0 || i >= this.run.length) return false;
    const prev = this.i;
    this.i = i;
    for (const d of this.diagrams) if (d.visible) this._draw(d, i, { dt, prev });
    this._counter();
    this._paintCount();
    this.session.at(i);
    return true;
  }

  _seen(entries) {
    for (const e of entries) {
      const d = this.diagrams.find((x) => x.el === e.target);
      if (!d) continue;
      d.visible = e.isIntersecting;
      if (d.visible && d.drawnAt !== this.i && this.i >= 0) this._draw(d, this.i, {});
    }
  }

  _draw(d, i, anim) {
    d.show(i, anim);
    d.drawnAt = i;
    d.el.setAttribute("data-da-shows", i);     // the step this diagram shows (tests, tools)
  }

  step(d) {
    this.pause(false);
    this.atEngine = false;
    const j = this.i + d;
    if (j >= this.run.length) {
      if (this.live && !this.session.state.done) { this._waitFor(j, false); return; }
      this._end();
      return;
    }
    this.show(Math.max(0, j), { dt: d > 0 ? this._anim() : 0 });
  }

  goto(i) { this.atEngine = false; this.show(Math.min(Math.max(0, i), this.run.length - 1)); }

  _scrubbed() {
    this.pause(false);
    this.atEngine = false;
    this.show(Number(this.scrub.value));
  }

  setSpeed(v) {
    this.speed = clampSpeed(v);
    this.speedIn.value = this.speed;
    this.due = performance.now() + 1000 / this.speed;
  }

  _anim() { return Math.min(MAX_ANIM_MS, 0.85 * 1000 / this.speed); }

  // ---- playing: at most one step per frame, on time; late frames slip, never skip ----------
  play() {
    if (this.playing) return;
    if (this.i >= this.run.length - 1 && !(this.live && this.follow && !this.session.state.done)) {
      if (this.run.length) this.show(0);         // at the end of a recording: from the start
    }
    this.playing = true;
    this.atEngine = false;
    this.drawn = 0;
    this.painted = -1;
    this.due = performance.now();
    this.noteEl.textContent = "";
    this._buttons();
    const loop = (now) => {
      if (!this.playing) return;
      this._tick(now);
      if (this.playing) this.raf = requestAnimationFrame(loop);
    };
    this.raf = requestAnimationFrame(loop);
  }

  pause(land = true) {
    if (!this.playing) return;
    this.playing = false;
    cancelAnimationFrame(this.raf);
    // ▶ following the engine asks for each step a tick ahead, so at the engine's end the page
    // may hold (or be about to get) one step more than it shows: ⏸ there lands on the engine's
    // latest step, where a steer button acts, not one behind it (and stays as that step comes)
    if (land && this.live && this.follow && !this.session.state.done
        && this.i >= this.run.length - 2) {
      this.atEngine = true;
      if (this.i < this.run.length - 1) this.show(this.run.length - 1);
    }
    this._buttons();
  }

  _tick(now) {
    if (now < this.due) return;
    const next = this.i + 1, iv = 1000 / this.speed;
    if (next < this.run.length) {
      this.show(next, { dt: this._anim() });
      this.due += iv;
      if (this.due < now) this.due = now + iv;       // late: slip, the next step waits its turn
      if (this.live && this.follow && next === this.run.length - 1) this.session.need();
    } else if (this.live && this.follow && !this.session.state.done) {
      this.session.need();                           // the engine runs it; shown when it comes
    } else {
      this.pause();
      this._end();
    }
  }

  _waitFor(j, playing) {
    this.waiting = j;
    this.session.need();
    if (playing) this.play();
  }

  _grown() {
    const n = this.run.length;
    this.scrub.max = Math.max(0, n - 1);
    this.root.setAttribute("data-da-steps", n);
    if (this.waiting !== undefined && this.waiting < n) {
      const j = this.waiting;
      this.waiting = undefined;
      this.show(j, { dt: this._anim() });
    } else if (this.atEngine && !this.playing && this.i < n - 1) this.show(n - 1);
    else if (this.i < 0 && n) this.show(0);
    this._counter();
  }

  // ---- what the page shows about the player --------------------------------------------------
  _counter() {
    const n = this.run.length, rec = this.run.steps[this.i];
    this.counterEl.textContent = rec ? `step ${rec.step}` : "step –";
    this.counterEl.title = rec ? `${this.i + 1} of ${n} steps in this page` : "";
    this.scrub.value = Math.max(0, this.i);
    this.root.setAttribute("data-da-step", this.i);
    if (rec) this.root.setAttribute("data-da-engine-step", rec.step);
    this._buttons();
  }

  _buttons() {
    // a diagram's own controls may depend on playing (diagram 4's steering: while ▶ follows
    // the engine the page may be one step behind it; paused, it must be at the last step)
    if (this.wasPlaying !== this.playing) {
      this.wasPlaying = this.playing;
      for (const d of this.diagrams) d.controls?.();
    }
    this.playB.disabled = this.playing;
    this.pauseB.disabled = !this.playing;
    this.prevB.disabled = this.i <= 0;
    this.root.classList.toggle("da-playing", this.playing);
  }

  _paintCount() {
    if (this.paintReq) return;
    this.paintReq = requestAnimationFrame(() => {
      this.paintReq = 0;
      if (this.i !== this.painted) {
        this.painted = this.i;
        this.drawn += 1;
        this.root.setAttribute("data-da-drawn", this.drawn);
      }
    });
  }

  note(text) { this.noteEl.textContent = text || ""; }

  _end() {
    const n = this.run.length, last = this.run.steps[n - 1];
    if (this.session.state.ended) {
      this.note(this.session.state.ended);
    } else if (!this.live) {
      this.note(`end of the recording (${n} steps): drag the slider back, or ▶ to watch it again`);
    } else if (!this.session.cfg.has_lab) {
      this.note("at the trace's last record: ▶ again reads what the server has written since");
    } else if (this.session.state.done) {
      const add = this.session.cfg.can_add
        ? "Press “new request” to add one and keep playing, or drag the slider back."
        : `${this.session.cfg.add_hint || "Add a request to the Lab in a cell"}, then ▶; or `
          + "drag the slider back.";
      this.note(`finished: no request is running any more (the last ended at step `
                + `${last ? last.step : "–"}). ${add}`);
    } else {
      this.note("at the engine's last step: tick “follow the engine” to run it on");
    }
  }

  _key(e) {
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")
        && t.type !== "checkbox") return;
    if (e.key === " ") { this.playing ? this.pause() : this.play(); }
    else if (e.key === "ArrowLeft") this.step(-1);
    else if (e.key === "ArrowRight") this.step(1);
    else return;
    e.preventDefault();
    e.stopPropagation();
  }

  destroy() {
    this.pause();
    this.seen.disconnect();
    this.sized.disconnect();
    this.offRun();
    for (const d of this.diagrams) d.destroy?.();
  }
}

function clampSpeed(v) { return Math.min(60, Math.max(1, Math.round(Number(v) || 1))); }
