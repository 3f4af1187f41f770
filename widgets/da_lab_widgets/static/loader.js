// The player widget's ES module, as anywidget loads it: the lab's modules (static/*.js, filled
// in below by bundle.py) are linked in the page, without a build step: each becomes a blob URL
// whose `from "./x.js"` imports name the blob URLs of the modules before it. They are
// evaluated once per page (every player shares them, and so the hover hub in store.js).
const SOURCES = /*SOURCES*/ {};
const ORDER = /*ORDER*/ [];
const KEY = /*KEY*/ "da_lab_modules";

export function load() {
  if (!globalThis[KEY]) {
    globalThis[KEY] = (async () => {
      const urls = {};
      for (const name of ORDER) {
        const src = SOURCES[name].replace(/(from\s*|import\s*\(\s*)(["'])\.\/([\w.-]+\.js)\2/g,
          (m, pre, q, dep) => pre + JSON.stringify(urls[dep]));
        const blob = new Blob([`${src}\n//# sourceURL=da_lab/${name}`], { type: "text/javascript" });
        urls[name] = URL.createObjectURL(blob);
      }
      return import(urls["app.js"]);
    })();
  }
  return globalThis[KEY];
}

// anywidget 0.11 gives each model 2 s to load its module and run initialize; then it rejects
// the model's `ready` ("[anywidget] Failed to initialize model.", an uncaught error) and every
// kernel message the model gets after that awaits the rejected `ready` and is dropped. On a busy
// machine, or a reload with several players, the module comes later than that, and the player
// then missed the kernel's steps and steering state. The model works once its module has come:
// so its messages are handled anyway (the class's handler, patched once per page), and that
// rejection, a timer's and not a failure, is not reported as an error.
const TIMED_OUT = "[anywidget] Failed to initialize model.";
if (!globalThis.__daLabQuiet) {
  globalThis.__daLabQuiet = true;
  globalThis.addEventListener?.("unhandledrejection", (e) => {
    if (String(e.reason?.message ?? e.reason).includes(TIMED_OUT)) e.preventDefault();
  });
}

async function keepMessages(model) {
  const mgr = model.widget_manager;
  if (!mgr || !mgr._models || typeof mgr.get_model !== "function") return;
  for (const id of Object.keys(mgr._models)) {
    const m = await mgr.get_model(id).catch(() => null);
    if (!m || m.get("_uid") !== model.get("_uid")) continue;
    const cls = Object.getPrototypeOf(m), base = cls && Object.getPrototypeOf(cls);
    if (!base || typeof cls._handle_comm_msg !== "function"
        || typeof base._handle_comm_msg !== "function") return;
    if (!cls.__daLabPatched) {
      const handle = cls._handle_comm_msg, plain = base._handle_comm_msg;
      cls.__daLabPatched = true;
      cls._handle_comm_msg = function (...msg) {
        return Promise.resolve(handle.apply(this, msg)).catch((e) => {
          if (String(e?.message ?? e).includes(TIMED_OUT)) return plain.apply(this, msg);
          throw e;
        });
      };
    }
    // this model's comm was bound to the handler it had when it was made
    if (m.comm && typeof m.comm.on_msg === "function") m.comm.on_msg(cls._handle_comm_msg.bind(m));
    return;
  }
}

export default {
  initialize({ model }) {
    keepMessages(model).catch(() => {});
    // messages that arrive while the modules load are kept, then handed over in order
    const early = [];
    const keep = (msg, buffers) => early.push([msg, buffers]);
    model.on("msg:custom", keep);
    // not returned: anywidget reports "[anywidget] Failed to initialize model." (an uncaught
    // error) when initialize takes over 2 s, as linking the modules does on a busy machine or
    // a reload with several players; render waits for them instead
    load().then((app) => {
      model.off("msg:custom", keep);
      const s = app.session(model);
      for (const [msg, buffers] of early) s.message(msg, buffers);
    }).catch((e) => console.error("da_lab: the player's modules did not load", e));
  },
  async render({ model, el }) {
    const app = await load();
    return app.render({ model, el, saved: !(await app.hasKernel(model)) });
  },
};
