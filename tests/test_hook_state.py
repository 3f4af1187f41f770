"""The tracker's per-step decision without an engine: director tokens, lag, bad token ids."""

import numpy as np

from da_lab.hook.state import EXTRA_DIRECTOR, EXTRA_ID, EXTRA_LAYOUT, Tracker
from da_lab.core.layout import Layout


def tracker(tiny_model, script):
    t = Tracker()
    t.tokenizer_path = tiny_model
    layout = Layout(block_size=32, head_blocks=1, chunk_blocks=(2, 2), prompt_len=5 * 32 + 7)
    extra = {EXTRA_LAYOUT: layout.to_dict(), EXTRA_ID: "a", EXTRA_DIRECTOR: script}
    return t, layout, extra


def step(t, extra, outputs, seq_len, q):
    rows = np.zeros((1, 16), dtype=np.int32)
    t.begin_step()
    return t.rewrite(["a"], [outputs], [extra], rows.__getitem__, np.array([seq_len]),
                     np.array([q]))


def test_director_tokens_land_at_their_output_index(tiny_model):
    t, layout, extra = tracker(tiny_model, [[1, [7, 8, 9]]])
    P = layout.prompt_len
    d = step(t, extra, [], P, P)              # prefill samples output 0: nothing forced
    assert d.forced == [] and d.sampling == [("a", 0)]
    outs = [5]
    for k, want in ((1, 7), (2, 8), (3, 9), (4, None)):
        d = step(t, None, outs, P + k, 1)     # decode step k samples output index k
        assert d.forced == ([(0, want)] if want is not None else [])
        outs.append(want or 5)


def test_tokens_the_hook_has_not_seen_are_counted(tiny_model):
    t, layout, extra = tracker(tiny_model, [])
    P = layout.prompt_len
    step(t, extra, [], P, P)
    step(t, None, [], P + 1, 1)      # output 0 sampled, its copy not landed yet (async)
    assert t.steps[-1].requests[0].tokens_unseen == 1
    step(t, None, [4, 4], P + 2, 1)
    assert t.steps[-1].requests[0].tokens_unseen == 0


def test_token_ids_outside_the_tokenizer_are_an_event_not_a_crash(tiny_model):
    t, layout, extra = tracker(tiny_model, [])
    P = layout.prompt_len
    step(t, extra, [], P, P)
    step(t, None, [50_000, 60_000], P + 2, 1)      # e.g. a model whose vocab is larger
    st = t.requests["a"]
    assert st.n_seen == 2
    assert [e["kind"] for e in st.events] == ["undecodable_token"]
