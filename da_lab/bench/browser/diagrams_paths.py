"""How da_lab/bench/browser/diagrams_browser.py drives each path's page: today's plotly
FigureWidgets
(`old`,
the player's Play/Step/slider are ipywidgets and every step is a kernel round trip) and the
browser-drawn diagrams (`new`, static/*.js: the player is in the page). Same measures, each in
the terms of its own page:

- a Step press, painted: from the click to the animation frame in which the page shows the new
  step and nothing more is still being drawn for it (old: no plotly event after that frame;
  new: the page draws a step synchronously in the click, so it is the next frame);
- Play: which steps were painted (old: distinct steps the counter showed; new: the player's
  data-da-drawn), and how long;
- dragging the slider across every step: frames per second in which the step on screen changed.
"""

from __future__ import annotations

# ---- old: plotly's figures, ipywidgets' controls ---------------------------------------------

OLD_READY = ".da-play button"
# Every plotly figure on the page reports its events into window.__ev (count, last time).
OLD_WATCH = """() => {
  window.__ev = window.__ev || {last: 0, n: 0};
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    if (gd.__watched) continue;
    gd.__watched = true;
    for (const e of ['plotly_afterplot', 'plotly_update', 'plotly_restyle', 'plotly_relayout'])
      gd.on(e, () => { window.__ev.last = performance.now(); window.__ev.n++; });
  }
  return document.querySelectorAll('.js-plotly-plot').length;
}"""
# Press Step; resolve at the frame in which `want` is on the counter, moved on to a later frame
# while plotly events still come (bench/widgets_browser.py's measure, as committed before).
OLD_STEP = """async (want) => {
  const counter = document.querySelector('.da-step-counter');
  const btn = document.querySelector('.da-step');
  const button = btn.tagName === 'BUTTON' ? btn : btn.querySelector('button');
  const t0 = performance.now();
  button.click();
  const frame = () => new Promise(r => requestAnimationFrame(r));
  let shownAt = null, still = 0, lastN = null, paintAfter = null;
  while (true) {
    await frame();
    const t = performance.now();
    if (t - t0 > 60000) return {error: 'timeout', counter: counter.innerText};
    if (shownAt === null) {
      if (counter.innerText.trim() === want) { shownAt = t; paintAfter = t; lastN = window.__ev.n; }
      continue;
    }
    if (window.__ev.n !== lastN) { lastN = window.__ev.n; still = 0; paintAfter = null; continue; }
    if (paintAfter === null) paintAfter = t;
    if (++still >= 2) break;
  }
  return {ms: paintAfter - t0};
}"""
OLD_COUNTER = ".da-step-counter"
OLD_PLAY = ".da-play button"
OLD_SLIDER = ".da-step-slider .noUi-handle, .da-step-slider .ui-slider-handle"

# ---- new: the page draws and plays --------------------------------------------------------------

NEW_READY = "[data-da-player][data-da-drawn]"
NEW_STEP = """async () => {
  const root = document.querySelector('[data-da-player]');
  const want = Number(root.dataset.daStep) + 1;
  const t0 = performance.now();
  document.querySelector('[data-da-action=next]').click();
  const frame = () => new Promise(r => requestAnimationFrame(r));
  while (Number(root.dataset.daStep) !== want) {
    await frame();
    if (performance.now() - t0 > 60000) return {error: 'timeout'};
  }
  await frame();
  return {ms: performance.now() - t0};
}"""
NEW_COUNTER = "[data-da-player]"
# The slider moved to a new step at every animation frame, first to last and back (what a
# drag as fast as the screen can show asks for): frames per second with a new step painted.
NEW_SWEEP = """async (n) => {
  const s = document.querySelector('[data-da-action=scrub]');
  const root = document.querySelector('[data-da-player]');
  const order = [...Array(n).keys(), ...[...Array(n).keys()].reverse()];
  const frame = () => new Promise((r) => requestAnimationFrame(r));
  await frame();
  const t0 = performance.now();
  let painted = 0;
  for (const v of order) {
    s.value = v; s.dispatchEvent(new Event('input'));
    await frame();
    if (Number(root.dataset.daStep) === v) painted++;
  }
  const ms = performance.now() - t0;
  return {frames: order.length, painted, ms: Math.round(ms),
          frames_per_s: Math.round(order.length / ms * 1e4) / 10}; }"""
NEW_SLIDER = "[data-da-action=scrub]"

# ---- both: what the step on screen did, frame by frame -------------------------------------

# Per animation frame, the step on screen (the counter's text, or data-da-step), from the call
# until window.__frames.stop is set.
FRAMES = """(sel) => {
  const e = document.querySelector(sel);
  const shown = () => e.hasAttribute('data-da-step') ? e.getAttribute('data-da-step')
                                                      : e.textContent.trim();
  window.__frames = {t: [], v: [], stop: false};
  const f = (t) => { if (window.__frames.stop) return;
    window.__frames.t.push(performance.now()); window.__frames.v.push(shown());
    requestAnimationFrame(f); };
  requestAnimationFrame(f);
}"""
# frames in which the step changed, over the time from the first frame to the last change
FRAMES_END = """() => { window.__frames.stop = true; const {t, v} = window.__frames;
  let changed = 0, last = t[0] || 0;
  for (let k = 1; k < v.length; k++) if (v[k] !== v[k - 1]) { changed++; last = t[k]; }
  return {frames: t.length, changed, ms: t.length ? last - t[0] : 0,
          distinct: new Set(v).size}; }"""
