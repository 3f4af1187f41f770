"""LiveFigure's kernel side, with a comm that records what reaches the browser: a browser copy
that missed the one-off messages (or a second tab asking for the widget's state) still gets
the current figure; once a view has drawn, each change costs one message again. (The browser
side is tests/test_browser.py.)"""

import comm
import pytest

sent: list[dict] = []


class _Recorder(comm.base_comm.BaseComm):
    def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys):
        sent.append({"type": msg_type, **(data or {})})


@pytest.fixture
def recorded(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: _Recorder(*a, **k))
    sent.clear()
    return sent


def _states(key: str) -> list:
    return [m["state"][key] for m in sent if m.get("method") == "update" and key in m["state"]]


def test_state_is_the_current_figure_until_a_view_drew(recorded):
    from da_lab_widgets.figure import LiveFigure

    f = LiveFigure(layout=dict(width=300))
    f.add_scatter(x=[], y=[], name="a")
    f.plotly_update(restyle_data={"x": [[1, 2, 3]], "y": [[4, 5, 6]]},
                    relayout_data={"title.text": "step 3"}, trace_indexes=[0])
    # Each message was followed by the whole figure: a copy that dropped the messages has it.
    data, layout = _states("_widget_data")[-1], _states("_widget_layout")[-1]
    assert data[0]["x"] == [1, 2, 3] and data[0]["y"] == [4, 5, 6] and data[0]["name"] == "a"
    assert layout["title"]["text"] == "step 3" and layout["width"] == 300
    # What a second tab asks for (get_state) is the current figure too.
    state = f.get_state()
    assert state["_widget_data"][0]["x"] == [1, 2, 3]
    assert state["_widget_layout"]["title"]["text"] == "step 3"

    # A view drew (plotly's view reports trace deltas): from now on only the messages go out.
    f._js2py_traceDeltas = {"trace_deltas": [{"uid": f.data[0].uid}],
                            "trace_edit_id": f._last_trace_edit_id}
    n, before = len(_states("_widget_data")), len(sent)
    f.plotly_update(restyle_data={"y": [[7, 8, 9]]}, trace_indexes=[0])
    assert len(_states("_widget_data")) == n
    # One comm message per edit (plotly.py's own: the two edit ids, the edit, its reset).
    (msg,) = sent[before:]
    assert msg["state"]["_py2js_update"]["style_data"] == {"y": [[7, 8, 9]]}
    assert f.get_state()["_widget_data"][0]["y"] == [7, 8, 9]
    # A new copy's state is the figure, with no edit left in it to apply twice.
    assert f.get_state()["_py2js_update"] is None


def test_plotly_module_reaches_the_page_once(recorded):
    from da_lab_widgets import figure

    figure._carrier = None
    figs = [figure.LiveFigure() for _ in range(3)]
    opens = [m for m in sent if m["type"] == "comm_open" and "_esm" in m["state"]]
    carriers = [m for m in opens if "plotly_module" in m["state"]]
    assert len(carriers) == 1 and len(carriers[0]["state"]["plotly_module"]) > 10**6
    # A figure's own module is a few lines that wait for the carrier's, not plotly's 5 MB.
    assert len(opens) == 4
    assert all(len(m["state"]["_esm"]) < 5000 for m in opens if m not in carriers)
    assert all(f.comm is not None for f in figs)


def test_no_front_end_costs_nothing_more():
    """Headless (export, tests): no comm to a browser, so no state is sent after messages."""
    from da_lab_widgets.figure import LiveFigure

    f = LiveFigure()
    assert isinstance(f.comm, comm.DummyComm)
    calls = []
    f.send_state = lambda key=None: calls.append(key)
    f.add_scatter(x=[1], y=[1])
    assert calls and ["_widget_data", "_widget_layout"] not in calls
