"""The real thing in a real browser: JupyterLab on localhost, the DA-hook notebook run in
headless Chromium (Debian's, driven by Playwright), Play pressed, FOCUS pressed, a block hovered.
"""

import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = "04_da_hook.ipynb"
CHROMIUM = os.environ.get("BROWSER_PATH", "/usr/bin/chromium")
SHOTS = ROOT / "out"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory):
    root = tmp_path_factory.mktemp("nb")
    # A copy (outputs never reach the repo) whose request has no scripted tags: any drop in
    # blocks read then comes from the FOCUS button alone.
    text = (ROOT / "notebooks" / NOTEBOOK).read_text()
    # Room for a slow machine: the FOCUS tag still fits when the steer lands late.
    assert "tags=SEED_TAGS" in text and "max_tokens=40" in text
    (root / NOTEBOOK).write_text(text.replace("tags=SEED_TAGS", "tags=[]")
                                 .replace("max_tokens=40", "max_tokens=120"))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         "--LabApp.expose_app_in_browser=True", "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=open(root / "server.log", "w"), env=env)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start: " + (root / "server.log").read_text()[-2000:])
    yield url, token
    proc.terminate()
    proc.wait(timeout=30)


def _text(page, cls: str) -> str:
    return page.locator(f".{cls}").first.inner_text(timeout=180_000)


def test_da_hook_notebook_in_chromium(jupyter):
    from playwright.sync_api import sync_playwright

    url, token = jupyter
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1500, "height": 2200})
        page.goto(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell", timeout=120_000)
        page.wait_for_selector(".jp-Notebook", timeout=120_000)
        page.wait_for_function(  # the kernel is up before the cells are sent
            "(() => { const w = window.jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session"
            " && w.sessionContext.session.kernel; return k && k.status === 'idle'; })()",
            timeout=120_000)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # The player appears once the kernel has started a live engine and drawn step 0.
        page.wait_for_selector(".da-play", timeout=300_000)
        first = _text(page, "da-step-counter")
        # JupyterLab only renders what is near the viewport: bring the chart into view.
        page.locator(".da-blocks-chart").first.scroll_into_view_if_needed(timeout=60_000)
        points_before = page.locator(".da-blocks-chart .scatterlayer .point").count()

        page.locator(".da-play button").first.click()          # Play
        page.wait_for_function(
            f"document.querySelector('.da-step-counter').innerText !== {first!r}",
            timeout=120_000)
        assert _text(page, "da-step-counter") != first
        # Clicking ▶ scrolled the page back up; the chart draws its new points once in view
        # (on a loaded 2-core machine that can take seconds, so poll rather than sleep).
        page.locator(".da-blocks-chart").first.scroll_into_view_if_needed(timeout=60_000)
        page.wait_for_function(
            "document.querySelectorAll('.da-blocks-chart .scatterlayer .point').length > "
            f"{points_before}", timeout=60_000)

        # Pause (Play's one button toggles), then steer: on a loaded 2-core machine a running
        # Play could otherwise finish the request before the click reaches the kernel.
        page.locator(".da-play button").first.click()
        page.wait_for_selector(".da-play button i.fa-play", timeout=60_000)
        n0 = int(_text(page, "da-blocks-read").split(":")[1])
        page.locator(".da-steer-focus button, button.da-steer-focus").first.click()   # FOCUS
        page.wait_for_function(
            "document.querySelector('.da-steer-status').innerText.includes('the director writes"
            " <focus')", timeout=60_000)
        page.locator(".da-play button").first.click()          # Play on: the tag is written
        page.wait_for_function(
            "(() => { const t = document.querySelector('.da-blocks-read').innerText;"
            f" return parseInt(t.split(':')[1]) < {n0}; }})()", timeout=180_000)

        # Hover a block id in the block-table row: its physical slot lights up. The rows are
        # runs under a per-block hover layer: block 0 of the staged row (b), the middle row.
        rows = page.locator('.da-blocks .nsewdrag[data-subplot="xy"]').first.bounding_box()
        page.mouse.move(rows["x"] + 3, rows["y"] + rows["height"] / 2)
        page.wait_for_function(
            "document.querySelector('.da-highlight').innerText.includes('physical')",
            timeout=60_000)
        page.screenshot(path=str(SHOTS / "browser_da_hook.png"), full_page=True)
        browser.close()
