"""The page's modules reach it as plain ES modules (static/*.js), no build step: the one module
anywidget loads carries them all, each linked after the modules it imports, and every import
names a module that is there. The same sources go into the exported page."""

import re

from da_lab_widgets import bundle
from da_lab_widgets.page import page_html
from da_lab_widgets.player import PlayerWidget

IMPORT = re.compile(r"""from\s*["']\./([\w.-]+\.js)["']""")


def test_every_module_is_linked_after_what_it_imports():
    src, order = bundle.sources(), bundle.order()
    assert order[-1] == "app.js" and sorted(order) == sorted(src)
    for name in order:
        for dep in IMPORT.findall(src[name]):
            assert dep in src, f"{name} imports {dep}, which static/ does not have"
            assert order.index(dep) < order.index(name), f"{dep} must come before {name}"
    # everything under static/ that is a module is used (the loader and page are not modules)
    shipped = {p.name for p in bundle.STATIC.glob("*.js")} - {"loader.js"}
    assert shipped == set(src)


def test_the_widget_and_the_page_carry_the_same_modules():
    esm = PlayerWidget._esm
    for name, text in bundle.sources().items():
        assert bundle._json(text)[1:-1] in esm, name
    assert "/*SOURCES*/" not in esm and len(esm) < 300_000      # a few hundred kB at most
    page = page_html({"uid": "u", "diagrams": []}, b"DAL1\x00\x00\x00\x00", title="t")
    assert esm in page and bundle.css() in page and '<script src="' not in page
