"""The paper's prompt as the paper renders it (core/paper_tools.py; Ho et al. 2026, §2.2 and
Appendix F): the context as a get_magic_chunk tool-call transcript through the model's chat
template, its chunk spans read off the rendered tokens, beside the reference's plain text; and
the paper's citation, right everywhere outside bench/results.

The lab's tokenizers: SmolLM2's (its template ignores tools) and the tiny models' (no template);
the tool-declaring templates are tests/chat_templates.py's, in two styles."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from chat_templates import CHATML_TOOLS, JSON_TOOLS

from da_lab.core import paper, paper_tools
from da_lab.core.mask import kept_blocks
from da_lab.core.tags import Directive, Mode

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = {"chatml": CHATML_TOOLS, "json": JSON_TOOLS}
QUESTION = "How long after its founding did Acme Corp go public?"
DOCS = ['Acme Corp "was" founded <in> 2003 in San Jose.\n\nIts history is long.',
        " The IPO: 2011, on the NYSE.\n", "Ünïcode 東京 émoji 🎉 and a tab\there",
        "Board members: A. Smith; B. Jones, C. Wu."]


@pytest.fixture(scope="module", params=["smollm2", "da-tiny-v1"])
def tok(request):
    from transformers import AutoTokenizer

    from da_lab.models.tiny import model_path

    return AutoTokenizer.from_pretrained(str(model_path(request.param)))


def rendered(doc: str, style: str) -> str:
    """A segment's text as the template writes it: JSON_TOOLS escapes it (`| tojson`)."""
    return doc if style == "chatml" else json.dumps(doc, ensure_ascii=False)[1:-1]


@pytest.mark.parametrize("style", TEMPLATES)
def test_spans_cover_exactly_each_segments_tool_response_text(tok, style):
    p = tok_prompt(tok, style)
    text, lay = p.meta["text"], p.layout
    assert p.meta["form"] == "tools" and lay.rules == "paper" and lay.n_chunks == len(DOCS)
    # The text is the template's own rendering of the transcript, and the ids its tokens.
    assert text == tok.apply_chat_template(
        paper_tools.messages(QUESTION, DOCS), tools=[paper_tools.TOOL],
        chat_template=TEMPLATES[style], tokenize=False, add_generation_prompt=True)
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
    assert p.token_ids == enc["input_ids"] and tok.decode(p.token_ids) == text
    offsets = enc["offset_mapping"]
    for k, ((a, b), (ca, cb)) in enumerate(zip(lay.spans, p.meta["char_spans"],
                                               strict=True), start=1):
        assert text[ca:cb] == rendered(DOCS[k - 1], style)
        assert text[:ca].endswith(rendered(f"Magic Chunk {k}:\n", style))
        # The chunk is exactly the tokens that hold any of its characters.
        assert list(range(a, b)) == [t for t, (s, e) in enumerate(offsets) if s < cb and e > ca]
        if style == "chatml":     # no token straddles a turn delimiter: the text itself
            assert tok.decode(p.token_ids[a:b]) == DOCS[k - 1]


def tok_prompt(tok, style: str = "chatml", **kw):
    return paper_tools.paper_prompt_for(tok, QUESTION, DOCS, chat_template=TEMPLATES[style],
                                        block_size=16, **kw)


def test_sink_tail_and_response_stay_visible_in_every_mode(tok):
    """§B: the first 16 tokens (the system instruction) are the sink, the question and the
    instruction through the end of the prompt the tail; FOCUS keeps those and the named
    chunk, LOCAL only those."""
    p = tok_prompt(tok)
    lay, ids, bs = p.layout, p.token_ids, p.layout.block_size
    assert lay.spans[0][0] >= paper_tools.SINK_TOKENS
    assert tok.decode(ids[:lay.spans[0][0]]).count("You are a helpful assistant.") == 1
    tail = tok.decode(ids[lay.spans[-1][1]:])
    assert f"Question:\n{QUESTION}\n\nInstructions:\n{paper.INSTRUCTIONS}" in tail
    assert tail.endswith("<|im_start|>assistant\n")
    seq = lay.prompt_len + 1
    sink = set(range(paper_tools.SINK_TOKENS // bs))
    tail_blocks = set(range(lay.spans[-1][1] // bs, -(-seq // bs)))
    inner = {k: set(range(-(-a // bs), b // bs)) for k, (a, b) in enumerate(lay.spans, 1)}
    local = set(kept_blocks(Directive(Mode.LOCAL), lay, seq, 1).tolist())
    focus = set(kept_blocks(Directive(Mode.FOCUS, chunks=(2,)), lay, seq, 1).tolist())
    assert sink | tail_blocks <= local and sink | tail_blocks | inner[2] <= focus
    assert not local & set().union(*inner.values())
    assert not focus & (inner[1] | inner[3] | inner[4])


def test_the_tool_form_is_the_default_exactly_when_the_template_declares_tools(tok):
    own = paper_tools.paper_prompt_for(tok, QUESTION, DOCS, block_size=16)
    assert own.meta["form"] == "plain" and own.layout.rules == "reference"   # no tools
    assert tok_prompt(tok).meta["form"] == "tools"
    # The plain form is today's: the reference's "Magic Chunk k:" text after the BOS.
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    old = paper.paper_prompt(enc, QUESTION, DOCS, block_size=16, bos_id=tok.bos_token_id)
    assert (own.token_ids, own.layout) == (old.token_ids, old.layout)
    forced = tok_prompt(tok, form="plain")
    assert (forced.token_ids, forced.layout) == (old.token_ids, old.layout)
    assert tok_prompt(tok, rules="reference").layout.rules == "reference"
    with pytest.raises(ValueError, match="form must be one of tools, plain"):
        tok_prompt(tok, form="xml")


def test_a_template_without_tools_gets_a_clear_error_naming_the_fallback(tok):
    why = "ignores the tools" if tok.chat_template else "no chat template"
    with pytest.raises(ValueError, match=f"form='tools'.*{why}.*Use form='plain'"):
        paper_tools.paper_prompt_for(tok, QUESTION, DOCS, form="tools")


@pytest.mark.parametrize("change, says", [
    # tool responses trimmed: a segment's own whitespace is not in the render
    (("m.content }}", "m.content | trim }}"), "trims or rewrites"),
    # tool responses dropped
    (("+ m.content }}", "}}"), "does not render a tool response's content once"),
    # tool calls dropped (an assistant turn with calls renders as plain content)
    (("m.role == 'assistant' and m.tool_calls", "false"), "tool calls"),
])
def test_templates_the_spans_cant_be_read_from_are_refused(tok, change, says):
    template = CHATML_TOOLS.replace(*change)
    assert template != CHATML_TOOLS
    with pytest.raises(ValueError, match=says):
        paper_tools.paper_prompt_for(tok, QUESTION, DOCS, chat_template=template,
                                     form="tools")


def test_one_long_text_is_segmented_by_the_papers_rules(tok):
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    text = "\n\n".join(f"Section {i}. " + "Records of the year and its events. " * 12
                       for i in range(20))
    p = paper_tools.paper_prompt_for(tok, QUESTION, text, chat_template=CHATML_TOOLS)
    assert list(p.chunks) == paper.segment_context(text, enc) and "".join(p.chunks) == text
    for (a, b), chunk in zip(p.layout.spans, p.chunks, strict=True):
        assert tok.decode(p.token_ids[a:b]) == chunk


def test_without_offsets_the_pieces_are_encoded_on_their_own(tok):
    """The client's path (a server's tokenizer has no offset mapping): spans exact by
    construction, and here the same tokens as the whole text's."""
    enc = lambda s: tok.encode(s, add_special_tokens=False)  # noqa: E731
    render = paper_tools.hf_render(tok, CHATML_TOOLS)
    p = paper_tools.tool_prompt(render, QUESTION, DOCS, encode=enc, block_size=16)
    assert tok.decode(p.token_ids) == p.meta["text"]
    for (a, b), doc in zip(p.layout.spans, DOCS, strict=True):
        assert tok.decode(p.token_ids[a:b]) == doc
    whole = tok_prompt(tok)
    assert (p.token_ids, p.layout) == (whole.token_ids, whole.layout)


def test_the_rendered_prompt_is_a_span_layout_the_wire_carries():
    from transformers import AutoTokenizer

    from da_lab.core.layout import Layout
    from da_lab.core.wire import layout_to_wire, parse_layout
    from da_lab.models.tiny import model_path

    tok = AutoTokenizer.from_pretrained(str(model_path("da-tiny-v1")))
    p = tok_prompt(tok)
    lay = p.layout
    assert parse_layout(layout_to_wire(lay), len(p.token_ids)) == lay
    assert Layout.from_dict(lay.to_dict()) == lay and lay.to_dict()["rules"] == "paper"
    assert np.all(np.diff([a for a, _ in lay.spans]) > 0)


# --- the paper's citation ---------------------------------------------------------------------

# Built from words, so that this file does not hold what it looks for.
WRONG = [" ".join(["Large", "Language", "Models", "Can", "Control", "Their", "Own"]),
         " ".join(["Their", "Own", "Attention", "Span"]),
         ", ".join(["Ho", "Ahmad", "Koh", "dos Santos"])]
RIGHT_TITLE = "Language Models Can Control Their Own Attention"
RIGHT_AUTHORS = "Ho, Ahmad, Koh, Yun, Schuster, dos Santos"


def _texts():
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    for name in out:
        path = ROOT / name
        if not name or name.startswith("bench/results/") or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if name.endswith(".ipynb"):
            cells = json.loads(text)["cells"]
            text = "\n".join("".join(c["source"]) for c in cells)
        yield name, " ".join(text.split())


def test_the_paper_is_cited_right_everywhere():
    bad = [(name, w) for name, text in _texts() for w in WRONG
           if re.search(re.escape(w), text, re.IGNORECASE)]
    assert not bad, bad
    for name in ("README.md", "docs/protocol.md"):
        text = " ".join((ROOT / name).read_text().split())
        assert RIGHT_TITLE in text and RIGHT_AUTHORS in text and "2609.02737" in text, name
