"""What the widgets say fits where it is said (issue 25): no button named that is not there, no
"LIVE = True" on a server's trace, no "?" for an impl a trace does not carry, no struck-through
example in the stream's legend when nothing was malformed."""

from types import SimpleNamespace

from da_lab_widgets.metadata_path import MetadataPathDiagram, impl_of
from da_lab_widgets.steering import REPLAY, SteeringPanel, stream_note


def _panel(can_add: bool) -> SteeringPanel:
    lab = SimpleNamespace(requests={"q1": {"finished": True}})   # what why_none reads
    p = SteeringPanel(lab, {"provenance": {}})
    p.req, p.can_add = "q1", can_add
    return p


def test_a_finished_request_names_the_new_request_button_only_where_it_is():
    assert "“+ new request” in the player" in _panel(True).why_none()
    why = _panel(False).why_none()
    assert "new request”" not in why and "lab.add_request" in why


def test_a_recording_does_not_ask_for_live_true():
    assert "LIVE" not in REPLAY and "recording" in REPLAY


def test_a_trace_without_a_skeleton_says_so():
    impl, backend, n = impl_of({"provenance": {}})
    assert "?" not in impl + backend and "not in this trace" in impl and n == 0
    d = MetadataPathDiagram({"provenance": {"backend": "CPU_ATTN"}})
    assert d.stages[-1].title == "attention impl (not in this trace)"
    assert d.backend == "CPU_ATTN"


def test_the_legend_has_no_struck_through_example():
    note = stream_note({"provenance": {"model_name": "da-tiny-tags"}}, {})
    assert "line-through" not in note and "&lt;focus C6" not in note


def test_an_engine_error_in_one_line():
    from da_lab_widgets.skeleton_answers import one_line

    err = ("ValidationError: 1 validation error for ModelConfig\n  Value error, torch.float32 "
           "is not supported for quantization method fp8 [type=value_error, input_value="
           "ArgsKwargs(()), input_type=ArgsKwargs]\n    For further information visit "
           "https://errors.pydantic.dev/2.11/v/value_error")
    assert one_line(err) == "torch.float32 is not supported for quantization method fp8"
    chain = "RuntimeError: Engine core initialization failed\n  caused by OSError: no file x\n"
    assert one_line(chain) == "OSError: no file x"
    assert one_line("") == "no message"
