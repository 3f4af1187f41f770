"""plotly's 5 MB front-end module goes to the browser once per kernel (figure.py's carrier
widget), not once per figure: a diagram's LiveFigure carries a few lines that wait for it."""

from da_lab_widgets import figure, preload_figures
from da_lab_widgets.figure import LiveFigure


def test_figures_share_one_copy_of_plotlys_module():
    assert len(figure._PLOTLY) > 1_000_000              # what each figure used to carry
    preload_figures()
    carrier = figure._carrier
    assert carrier is not None and carrier.plotly_module == figure._PLOTLY
    figs = [LiveFigure(), LiveFigure(layout=dict(height=100))]
    for f in figs:
        # its own few kB of front end (the edits' routing), never plotly's 5 MB
        assert len(f._esm) < 10_000 and figure._KEY in f._esm
    preload_figures()
    assert figure._carrier is carrier                   # once per kernel
    # The figures still behave as plotly figures on the Python side, and their state is the
    # current figure (a second tab draws what is there now, not what was built).
    figs[1].add_scatter(x=[0, 1], y=[2, 3])
    assert list(figs[1].data[0].y) == [2, 3]
    state = figs[1].get_state()
    assert state["_widget_data"][0]["y"] == [2, 3]
