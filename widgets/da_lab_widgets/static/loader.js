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

export default {
  initialize({ model }) {
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
