// The entry point: one session per player widget model (the run in the page, the kernel's
// messages, what the kernel last said about the live engine) and one Player per view.
// The same code runs inside anywidget (JupyterLab) and in an exported page, where `model` is a
// small stand-in over the embedded run (page.js).

import { pageState } from "./pagestate.js";
import { hub, Run } from "./store.js";
import { Player } from "./player.js";
import { SkeletonDiagram } from "./skeleton.js";
import { BlocksDiagram } from "./blocks.js";
import { PathDiagram } from "./path.js";
import { HookDiagram } from "./hook.js";

const KINDS = { 1: SkeletonDiagram, 2: BlocksDiagram, 3: PathDiagram, 4: HookDiagram };
const AT_MS = 300;          // the step on screen reaches the kernel once it rests this long

class Session {
  constructor(model) {
    this.model = model;
    this.cfg = model.get("config");
    this.run = new Run(this.cfg.header);
    this.state = { done: false, ...(this.cfg.state || {}) };
    this.players = new Set();
    this.listeners = new Set();
    this.pending = -1;
    const base = model.get("_base");
    if (base && base.byteLength) this.run.append(base);
    model.on("msg:custom", (msg, buffers) => this.message(msg, buffers));
    if (this.cfg.kernel) this.send({ type: "hello", have: this.run.length });
  }
  send(msg) { if (this.cfg.kernel) this.model.send(msg); }

  // The widget came back from the notebook's saved state with no kernel behind it (a saved
  // lesson reopened): it shows the steps it was saved with and says so; nothing can run.
  saved() {
    if (this.cfg.saved) return;
    this.cfg = { ...this.cfg, kernel: false, live: false, can_add: false, saved: true };
    this.state = { ...this.state, done: true, steer: null };
  }
  on(fn) { this.listeners.add(fn); return () => this.listeners.delete(fn); }

  message(msg, buffers) {
    if (!msg || typeof msg !== "object") return;
    if (msg.type === "steps" && buffers && buffers.length) {
      const got = this.run.append(buffers[0]);
      if (got === "gap") this.send({ type: "hello", have: this.run.length });
    }
    if (this.pending >= 0 && (this.run.length > this.pending || msg.none)) this._asking(-1);
    if (msg.hello) this.greeted = true;    // the kernel answered this view's hello
    const { type, go, hello, ...state } = msg;
    Object.assign(this.state, state);
    for (const fn of this.listeners) fn(this.state, msg);
    if (go !== undefined && go !== null) {
      this.state.go = go;        // a view made after this message starts there (Player)
      for (const p of this.players) p.goto(go);
    }
  }

  // the next step of a live run (at most one ask in flight)
  need() {
    if (this.pending === this.run.length) return;
    this._asking(this.run.length);
    this.send({ type: "need", have: this.run.length });
  }

  // the step asked of the engine (-1: none); the players say so in data-da-asking (tests)
  _asking(n) {
    this.pending = n;
    for (const p of this.players) p.root.toggleAttribute("data-da-asking", n >= 0);
  }

  // The step on screen, for the kernel's `player.i`, once it rests (not per frame); never
  // before the kernel answered this view's hello (a reloaded page draws step 0 first, and
  // would tell the kernel so before it has heard where the player is).
  at(i) {
    this.atI = i;
    clearTimeout(this.atTimer);
    this.atTimer = setTimeout(() => {
      if (!this.greeted && this.cfg.kernel) return;
      if (this.atI !== this.sentAt) { this.sentAt = this.atI; this.send({ type: "at", i: this.atI }); }
    }, AT_MS);
  }
}

export function session(model) {
  const uid = model.get("_uid");
  const sessions = pageState().sessions;
  let s = sessions.get(uid);
  if (!s) { s = new Session(model); sessions.set(uid, s); }
  return s;
}

// Does `model` still have a kernel behind it? A widget restored from a saved notebook has no
// comm (ipywidgets' comm_live); anywidget hands us a proxy, so ask the manager for the model.
export async function hasKernel(model) {
  const mgr = model.widget_manager, uid = model.get("_uid");
  if (!mgr || !mgr._models || typeof mgr.get_model !== "function") return true;
  for (const id of Object.keys(mgr._models)) {
    const m = await mgr.get_model(id).catch(() => null);
    if (m && m.get("_uid") === uid && "comm_live" in m) return !!m.comm_live;
  }
  return true;
}

export function render({ model, el, saved = false }) {
  const s = session(model);
  if (saved) s.saved();
  const group = hub(s.cfg.link || s.cfg.uid);
  const diagrams = s.cfg.diagrams.map((c) => new KINDS[c.kind]({ session: s, run: s.run, cfg: c,
                                                                 hub: group }));
  const root = document.createElement("div");
  el.appendChild(root);
  const player = new Player(root, s, diagrams);
  for (const d of diagrams) d.player = player;
  s.players.add(player);
  const off = s.on((state, msg) => {
    if (msg.note !== undefined) player.note(msg.note);
    for (const d of diagrams) d.state?.(state, msg);
  });
  return () => { off(); s.players.delete(player); player.destroy(); root.remove(); };
}

export { Run } from "./store.js";
export default { initialize({ model }) { session(model); }, render };
