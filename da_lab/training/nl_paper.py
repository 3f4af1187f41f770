"""Replies in the paper's protocol (Ho et al. 2026, core/paper.py's instructions) for SmolLM2-DA
training samples (issue 40): "Use at least one <focus> block, end with a <local> block
committing to the final answer, and wrap the final answer in <answer>...</answer>."

    single   <focus magic_chunks="7">EVIDENCE</focus>
             <local><answer>REPLY</answer></local>
    multi    <focus magic_chunks="2,9">EVIDENCE 2 EVIDENCE 9</focus>
             <local><answer>REPLY</answer></local>
    local    <local><answer>REPLY</answer></local>

EVIDENCE is the sentence of each named document that holds the asked value, copied verbatim
(what FOCUS is for: "extract verbatim facts"); REPLY is the card dialect's reply, so both
dialects are scored the same way. Every tag is its own run of tokens, so the tag machine traps
it at a token's end, and each tag's effect is listed as (output index of its last token, the
directive in force from the next step on): a closing tag lists the directive it restores,
which is what the hook applies and what training/masks.py expects.
"""

from __future__ import annotations

import re

from da_lab.core.directive import Closing
from da_lab.core.tags import GLOBAL, Directive, Mode, tag_text
from da_lab.training import nl_task as N

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")


def evidence(text: str, value: str) -> str | None:
    """The first sentence of `text` that holds `value` (normalised, whole words), verbatim."""
    for sentence in _SENTENCE.split(text):
        if sentence.strip() and N.holders([sentence], [value]):
            return sentence.strip()
    return None


def reply(tok, directive: Directive, facts: list[str],
          answer: str) -> tuple[list[int], list[tuple[int, Directive]], str]:
    """(token ids ending in EOS, the tags' effects, the text) of one paper-protocol reply."""
    pieces: list[tuple[str, Directive | None]] = []
    if directive.mode is Mode.FOCUS:
        pieces += [(tag_text(directive, "paper"), directive), (" ".join(facts), None),
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


def facts_for(texts: list[str], chunks: tuple[int, ...], values: list[str],
              fallback: str) -> list[str]:
    """One evidence sentence per named chunk (the first holding one of the asked values),
    `fallback` when a document writes the value some way the sentence search can't find."""
    return [next((e for v in values if (e := evidence(texts[c - 1], v))), fallback)
            for c in chunks]
