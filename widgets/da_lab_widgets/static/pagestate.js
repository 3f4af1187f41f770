// The page's one mutable state (no module keeps any: tests/test_module_state.py reads every
// module's top level). One object per document, made on first use and kept on the document, so
// a module evaluated again (a reload of the widget's module) finds what the page already holds:
//   sessions  one per player widget model (app.js), keyed by the model's uid
//   hubs      the cross-diagram hover groups (store.js `hub`), keyed by a Highlight's key
//   tip       the one tooltip element (dom.js)
//   ctx2d, widths, inks   measuring caches (dom.js textWidth, look.js ink)
export function pageState() {
  return (document.__daLabPage ??= {
    sessions: new Map(), hubs: new Map(), tip: null, ctx2d: null,
    widths: new Map(), inks: new Map(),
  });
}
