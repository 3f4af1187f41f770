"""The exported page as the page tests open it: `da-lab export TRACE --html` written to a temp
folder, opened from file:// in headless Chromium (Debian's, through Playwright) with every
request that is not a file refused, so a page that needs the network fails. `window.daLab`
(page.py) is the page's session, player root and `goto(i)`."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces"
CHROMIUM = os.environ.get("BROWSER_PATH", "/usr/bin/chromium")
SHIPPED = sorted(p.name.removesuffix(".jsonl.gz") for p in TRACES.glob("*.jsonl.gz"))


def write_page(trace: Path, out: Path, *, eager: bool = False) -> Path:
    """`da-lab export TRACE --html out`; `eager`: every diagram drawn at every step, also
    those out of view (as image export draws them)."""
    from da_lab_widgets.export import export_trace, run_page

    if eager:
        out.write_text(run_page(trace, eager=True))
        return out
    (page,) = export_trace(trace, html=out)
    return page


@contextlib.contextmanager
def chromium():
    """One headless Chromium for a module's pages."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def open_page(browser, path: Path, width: int = 1366, height: int = 768):
    """The page loaded; `page.errors`: every console error and uncaught exception;
    `page.offline_requests`: every request it tried that was not a file (refused)."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.errors, page.offline_requests = [], []
    page.on("console", lambda m: m.type == "error" and page.errors.append(m.text))
    page.on("pageerror", lambda e: page.errors.append(f"uncaught: {e}"))
    page.route("**/*", lambda r: (page.offline_requests.append(r.request.url), r.abort())
               if not r.request.url.startswith(("file:", "blob:", "data:")) else r.continue_())
    page.goto(path.resolve().as_uri(), timeout=120_000)
    page.wait_for_function("window.daLab !== undefined", timeout=60_000)
    return page
