// What every diagram shares: its root element (data-da-diagram = its number), laying itself
// out again when the width it is given changes, and the request it follows (the run's first
// unless one was named). A diagram implements layout(width) and show(i, {dt}).

import { h } from "./dom.js";

export class Diagram {
  constructor(kind, cls, { session, run, cfg, hub }, maxWidth = 1700) {
    Object.assign(this, { session, run, cfg, hub, req: cfg.req || null, i: -1, width: 0,
                          maxWidth });
    this.el = h("div", { class: `da-diagram ${cls}`, "data-da-diagram": String(kind) });
    this.resize = new ResizeObserver(() => this.fit());
    this.resize.observe(this.el);
  }

  fit() {
    const w = Math.max(640, Math.min(this.maxWidth, Math.floor(this.el.clientWidth || 900)));
    if (Math.abs(w - this.width) < 8) return;
    this.width = w;
    this.layout(w);
    if (this.i >= 0) this.show(this.i, {});
  }

  // step i's record, the request followed settled; null while the run has no request yet
  begin(i) {
    if (!this.width) this.fit();
    this.i = i;
    this.req ??= this.run.firstRequest(i);
    return this.req ? this.run.steps[i] : null;
  }

  destroy() { this.resize.disconnect(); this.offHub?.(); }
}
