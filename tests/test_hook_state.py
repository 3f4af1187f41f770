"""The hook's per-step decision without an engine (the request book and one Step): director
tokens, lag, bad token ids, faults ending a request."""

import numpy as np
import pytest

from da_lab.core.layout import Layout
from da_lab.core.wire import EXTRA_DIRECTOR, EXTRA_ID, EXTRA_LAYOUT
from da_lab.hook.book import RequestBook
from da_lab.hook.facts import EngineFacts
from da_lab.hook.plan import Batch, StepPlan, decide


def tracker(tiny_model, script):
    t = RequestBook()
    t.learn(EngineFacts(tokenizer_path=tiny_model))
    layout = Layout(block_size=32, head_blocks=1, chunk_blocks=(2, 2), prompt_len=5 * 32 + 7)
    extra = {EXTRA_LAYOUT: layout.to_dict(), EXTRA_ID: "a", EXTRA_DIRECTOR: script}
    return t, layout, extra


def step(t, extra, outputs, seq_len, q) -> StepPlan:
    """One step of the book for request 'a' whose sampled tokens so far are `outputs` (the
    copies that landed): advance, decide, commit, as Session.begin_step does."""
    rows = np.zeros((1, 16), dtype=np.int32)
    st = t.requests.get("a")
    if st is not None:
        st.captured.extend(outputs[len(st.captured):])
    batch = Batch(("a",), np.array([seq_len]), np.array([q]), rows.__getitem__, (extra,),
                  (None,))
    index = t.begin_step()
    n_events, detok = t.advance(batch)
    plan, failed = decide(index, t, batch, True, n_events, detok)
    t.commit(plan, failed)
    return plan


def forced(plan: StepPlan) -> list[tuple[int, int]]:
    return [(p.row, p.forced_token) for p in plan.requests if p.forced_token is not None]


def test_director_tokens_land_at_their_output_index(tiny_model):
    t, layout, extra = tracker(tiny_model, [[1, [7, 8, 9]]])
    P = layout.prompt_len
    d = step(t, extra, [], P, P)              # prefill samples output 0: nothing forced
    assert forced(d) == [] and [(p.req_id, p.row) for p in d.requests if p.samples] == \
        [("a", 0)]
    outs = [5]
    for k, want in ((1, 7), (2, 8), (3, 9), (4, None)):
        d = step(t, None, outs, P + k, 1)     # decode step k samples output index k
        assert forced(d) == ([(0, want)] if want is not None else [])
        outs.append(want or 5)


def test_a_plan_is_a_value(tiny_model):
    """The plan is frozen: nobody edits a decision after it is made (issue 54)."""
    import dataclasses

    import pytest

    t, layout, extra = tracker(tiny_model, [[1, [7]]])
    plan = step(t, extra, [], layout.prompt_len, layout.prompt_len)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.requests = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.requests[0].kept = None
    with pytest.raises(ValueError):          # the kept array is read-only too
        plan.requests[0].kept[0] = 9


def test_tokens_the_hook_has_not_seen_are_counted(tiny_model):
    t, layout, extra = tracker(tiny_model, [])
    P = layout.prompt_len
    step(t, extra, [], P, P)
    s = step(t, None, [], P + 1, 1)  # output 0 sampled, its copy not landed yet (async)
    assert s.requests[0].tokens_unseen == 1
    s = step(t, None, [4, 4], P + 2, 1)
    assert s.requests[0].tokens_unseen == 0


def test_token_ids_outside_the_tokenizer_are_an_event_not_a_crash(tiny_model):
    t, layout, extra = tracker(tiny_model, [])
    P = layout.prompt_len
    step(t, extra, [], P, P)
    step(t, None, [50_000, 60_000], P + 2, 1)      # e.g. a model whose vocab is larger
    st = t.requests["a"]
    assert st.n_seen == 2
    assert [e["kind"] for e in st.events] == ["undecodable_token"]


# ---- a vLLM whose runner calls differ must not switch DA off silently -------------------------
def test_an_unknown_metadata_call_raises_naming_the_supported_versions():
    import pytest

    from da_lab.hook.errors import DAUnsupported
    from da_lab.hook.runners import v1
    from da_lab.hook.session import SESSION
    from da_lab.versions.releases import supported_range

    calls = []

    def orig(self, *args, **kwargs):
        calls.append(kwargs)
        return "built"

    build = v1._wrap_build_attention_metadata(orig)
    dummy = v1._wrap_dummy_run(lambda self: build(self, num_tokens=1, num_reqs=1))
    assert dummy(object()) == "built" and not SESSION.in_dummy_run()  # a dummy run passes
    with pytest.raises(DAUnsupported) as e:       # a real step without the step's keywords
        build(object(), num_tokens=8, num_reqs=1)
    msg = str(e.value)
    assert "\n" not in msg and supported_range() in msg and len(calls) == 1


def test_a_runner_without_the_known_signature_is_refused():
    import pytest

    from da_lab.hook.errors import DAUnsupported
    from da_lab.hook.runners import v1
    from da_lab.versions.needs import needs_for

    class Runner:
        def _build_attention_metadata(self, num_tokens, num_reqs):   # no num_scheduled_tokens
            return None

        _dummy_run = _sample = execute_model = get_kv_cache_spec = initialize_kv_cache = \
            _build_attention_metadata

    with pytest.raises(DAUnsupported, match="takes no num_scheduled_tokens"):
        v1.check_runner(Runner, needs_for("0.32.0", ("v1",)))
    del Runner._sample
    with pytest.raises(DAUnsupported, match=r"Runner has no _sample\(\)"):
        v1.check_runner(Runner, needs_for("0.32.0", ("v1",)))


# ---- the sampled-token lag is fixed, so tensor-parallel ranks decide alike -------------------
class _Landed:
    """A CUDA event stand-in that has landed (query() True): a copy that was fast this time."""

    def query(self):
        return True

    def synchronize(self):
        pass


def _drained_after(lag: int) -> list[list[int]]:
    """Queue one sampled token per step for request 'a' and record what each drain hands over."""
    import torch

    from da_lab.hook.request import RequestState
    from da_lab.hook.session import Session

    session = Session()
    book = session.book
    book.learn(EngineFacts(token_lag=lag))
    st = RequestState.__new__(RequestState)
    st.captured = []
    book.requests = {"a": st}
    seen = []
    for s in range(4):
        # The runners' own step start: drain, advance, read the batch (what step s may read).
        session.begin_step(lambda: seen.append(list(st.captured)), held={"a"})
        assert book.step_index == s
        book.queue_sampled(s, [("a", 0)], torch.tensor([10 + s]), _Landed())
    return seen


def test_tokens_reach_the_tag_machine_after_a_fixed_lag_even_when_copies_land_early():
    # Without async scheduling: step s reads every token sampled before it.
    assert _drained_after(0) == [[], [10], [10, 11], [10, 11, 12]]
    # With it, one step later — even though every copy here has already landed: a rank whose
    # copy happens to land sooner must not decide differently from one whose copy is late.
    assert _drained_after(1) == [[], [], [10], [10, 11]]


def test_a_fault_ending_a_request_the_runner_dropped_stays_with_it(tiny_model, monkeypatch):
    """The runner may drop a finished request before the after-step sees vLLM finish it (the
    batch steps on): that ending takes the same guard, so a failure there refuses that request
    alone and the one beside it ends as usual."""
    from da_lab.hook import faults

    monkeypatch.setenv(faults.ENV, "1")
    t, _, extra = tracker(tiny_model, [])
    t.track("r1", dict(extra, **{EXTRA_ID: "fault-after_step-1"}))
    t.track("r2", dict(extra, **{EXTRA_ID: "plain"}))
    assert set(t.requests) == {"r1", "r2"}
    t.forget_absent(set())                      # the runner holds neither any more
    assert not t.requests and "plain" in t.finished and "fault-after_step-1" not in t.finished
    refused = [w for w in t.warnings if w["kind"] == "da_refused"]
    assert [w["req"] for w in refused] == ["fault-after_step-1"]
    assert "fault injected at after_step" in refused[0]["detail"]


def test_a_fault_ending_a_request_by_its_da_id_refuses_it_alone(tiny_model, monkeypatch):
    """The Lab ends requests by the caller's id: a failure there refuses that request only
    (vLLM's ids it runs under), not every DA request in the batch."""
    from da_lab.hook import faults
    from da_lab.hook.session import Session

    monkeypatch.setenv(faults.ENV, "1")
    session = Session()
    t, _, extra = tracker(tiny_model, [])
    session.book = t
    t.track("r1", dict(extra, **{EXTRA_ID: "fault-after_step-1"}))
    t.track("r2", dict(extra, **{EXTRA_ID: "plain"}))
    report = session.after_step(["fault-after_step-1"])
    assert set(t.requests) == {"r2"} and "r2" not in t.refused
    refused = [w for w in report.warnings if w["kind"] == "da_refused"]
    assert [w["req"] for w in refused] == ["fault-after_step-1"]


# ---- the suite's guard: a hook_error fails the test that did not ask for it -------------------
@pytest.mark.hook_errors       # the inner tests raise theirs in this process's session
def test_a_hook_error_fails_a_test_unless_it_is_expected(pytester):
    """tests/conftest.py's autouse fixture, run on two inner tests: the hook's broad catches
    keep the engine alive, so without it a hook bug would show only as DA quietly off."""
    from pathlib import Path

    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_inner='''
        import pytest
        from da_lab.hook.session import SESSION

        def test_unexpected():
            SESSION.book.hook_error("a step", RuntimeError("boom"), [])

        @pytest.mark.hook_errors
        def test_expected():
            SESSION.book.hook_error("a step", RuntimeError("boom"), [])

        def test_quiet():
            pass
    ''')
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=3, errors=1)      # the error: test_unexpected's teardown
    assert "ERROR at teardown of test_unexpected" in result.stdout.str()
    assert "DA went off silently" in result.stdout.str() and "boom" in result.stdout.str()
