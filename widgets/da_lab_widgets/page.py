"""A page that needs no kernel: the player and the diagrams with a whole run embedded, in one
HTML file that opens from file:// with no network. The modules are the notebook's (bundle.py);
`model` is a stand-in over the embedded run (the config and the run's packet), so the page
draws with exactly the code JupyterLab runs."""

from __future__ import annotations

import base64
import html

from .bundle import _json, css, esm

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ margin: 10px 16px; font-family: system-ui, -apple-system, "DejaVu Sans", sans-serif; }}
h1 {{ font-size: 17px; margin: 4px 0; }}
.da-page-sub {{ font-size: 12px; color: #555; margin: 0 0 6px; }}
{css}
</style></head>
<body>
<h1>{title}</h1>
<p class="da-page-sub">{subtitle}</p>
<div id="da-root"></div>
<script type="module">
{esm}
const CONFIG = {config};
const RUN = "{packet}";
const bytes = Uint8Array.from(atob(RUN), (c) => c.charCodeAt(0));
// the widget model's stand-in: the state a kernel would have synced, and no kernel to talk to
const model = {{
  get: (k) => ({{ config: CONFIG, _base: new DataView(bytes.buffer), _uid: CONFIG.uid }})[k],
  set() {{}}, save_changes() {{}}, on() {{}}, off() {{}}, send() {{}},
}};
const app = await load();
const el = document.getElementById("da-root");
await app.render({{ model, el }});
const root = el.querySelector("[data-da-player]");
root.focus({{ preventScroll: true }});
const session = app.session(model);
const goto = (i) => {{ for (const p of session.players) p.goto(i); }};
window.daLab = {{ app, session, root, goto }};
</script></body></html>
"""


def page_html(config: dict, packet: bytes, *, title: str, subtitle: str = "") -> str:
    """The page for `config` (Player.config with kernel=False) and the run's `packet`."""
    return _PAGE.format(title=html.escape(title), subtitle=html.escape(subtitle), css=css(),
                        esm=esm(), config=_json(config),
                        packet=base64.b64encode(packet).decode("ascii"))
