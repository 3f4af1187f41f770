"""plotly's 5 MB front-end bundle goes to the browser once per kernel (widgets/bundle.py), not once
per figure: a diagram's figure carries a few lines that wait for it."""

from da_lab_widgets import FigureWidget, bundle, preload_figures


def test_figures_share_one_copy_of_plotlys_bundle():
    text = bundle.bundle_text()
    assert len(text) > 1_000_000                     # what each figure used to carry
    figs = [FigureWidget(), FigureWidget(layout=dict(height=100))]
    key = bundle.global_key(text)
    for f in figs:
        assert len(f._esm) < 1_000 and key in f._esm and "await g.ready" in f._esm
    carrier = bundle._carrier
    assert carrier is not None
    preload_figures()
    assert bundle._carrier is carrier                 # once per kernel
    assert len(carrier._esm) > len(text) and carrier._esm.count(key) == 1
    assert key in carrier._esm and "g.resolve(m)" in carrier._esm
    # The figures still behave as plotly figures on the Python side.
    figs[1].add_scatter(x=[0, 1], y=[2, 3])
    assert list(figs[1].data[0].y) == [2, 3]
