"""Replies in the paper's protocol (Ho et al. 2026, core/paper.py's instructions) for SmolLM2-DA
training samples (issue 40): "Use at least one <focus> block, end with a <local> block
committing to the final answer, and wrap the final answer in <answer>...</answer>."

    single   <focus magic_chunks="7">REPLY</focus>
             <local><answer>REPLY</answer></local>
    multi    <focus magic_chunks="2,9">REPLY</focus>
             <local><answer>REPLY</answer></local>
    blocks   <focus magic_chunks="9">FACT</focus>          (reply_blocks: one block per fact,
             <focus magic_chunks="2">FACT</focus>           as the paper's Section 2 example;
             <local><answer>REPLY</answer></local>          nl_pairs' two-document samples)
    local    <local><answer>REPLY</answer></local>

REPLY is the card dialect's reply: the asked fact stated in one sentence while the named
documents are in view (what FOCUS is for: "extract verbatim facts" -- here the fact, in the
document's value), then committed under LOCAL, so both dialects are scored the same way. The
2026-12-05 delta copied the whole evidence sentence under FOCUS instead and picked a sentence
without the value in 155 of 328 held-out prompts (docs/models.md). Every tag is its own run
of tokens, so the tag machine traps it at a token's end, and each tag's effect is listed as
(output index of its last token, the directive in force from the next step on): a closing tag
lists the directive it restores, which is what the hook applies and what training/masks.py
expects.
"""

from __future__ import annotations

from da_lab.core.directive import Closing
from da_lab.core.tags import GLOBAL, Directive, Mode, tag_text


def reply(tok, directive: Directive,
          answer: str) -> tuple[list[int], list[tuple[int, Directive]], str]:
    """(token ids ending in EOS, the tags' effects, the text) of one paper-protocol reply."""
    parts = [(directive, answer)] if directive.mode is Mode.FOCUS else []
    return reply_blocks(tok, parts, answer)


def reply_blocks(tok, parts: list[tuple[Directive, str]],
                 answer: str) -> tuple[list[int], list[tuple[int, Directive]], str]:
    """A reply of one focus block per (FOCUS directive, the fact stated under it), then the
    answer under <local>."""
    pieces: list[tuple[str, Directive | None]] = []
    for directive, fact in parts:
        pieces += [(tag_text(directive, "paper"), directive), (fact, None),
                   (tag_text(Closing(Mode.FOCUS)), GLOBAL), ("\n", None)]
    local = Directive(Mode.LOCAL)
    pieces += [(tag_text(local, "paper"), local), ("<answer>", None), (answer, None),
               ("</answer>", None), (tag_text(Closing(Mode.LOCAL)), GLOBAL)]
    ids: list[int] = []
    tags: list[tuple[int, Directive]] = []
    for text, effect in pieces:
        ids += tok.encode(text)
        if effect is not None:
            tags.append((len(ids) - 1, effect))
    return ids + [tok.eos_id], tags, "".join(t for t, _ in pieces)
