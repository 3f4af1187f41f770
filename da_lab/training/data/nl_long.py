"""Training samples of the paper's own task shape (issue 58): one long text cut into ~2,048-token
segments by the paper's segmenter (core/paper.segment_context), the asked fact in one segment,
or for a two-part question in two different segments; prompt and reply in the paper's protocol.

How one is made (as eval_needle makes its eval lines): the documents of a one- or two-document
sample (nl_gen / nl_pairs: the asked entities, their near duplicates, others), more documents of
further samples of the same split as hay (none names an asked entity or holds an asked value),
the asked entities' documents put at random depths, all joined by blank lines and segmented.
Documents are shorter than a segment, so each lies whole in one: the segment holding an asked
entity's document is the one to focus on. A two-part question whose two documents land in one
segment is placed again (the paper's case is two segments).

    single   <focus magic_chunks="2">FACT</focus>\\n<local><answer>FACT</answer></local>
    multi    <focus magic_chunks="3">FACT A</focus>\\n<focus magic_chunks="1">FACT B</focus>\\n
             <local><answer>A, and B</answer></local>        (form="joint": one block "1,3")

Held-out domains stay held out: the base sample and every hay sample draw from `split`.
"""

from __future__ import annotations

from da_lab.core.paper import segment_context
from da_lab.core.tags import Directive, Mode, tag_text
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_pairs as NP
from da_lab.training.data import nl_paper as P
from da_lab.training.data import nl_task as N
from da_lab.training.data.task import Sample

TOKENS = (4000, 12000)
BASE = {"n_chunks": (12, 24), "context": (2000, 3000)}


def _base(rng, kind, heldout, split, tok, form, pair_kind):
    """(documents, [(document index, fact)] of the asked ones in question order, question,
    answer, values, the base sample's meta)."""
    if kind == "single":
        s = G.make_sample(rng, heldout=heldout, split=split, kind="single", tok=tok,
                          protocol="paper", **BASE)
        k = s.directive.chunks[0]
        return (s.meta["documents"], [(k - 1, s.answer)], s.meta["question"], s.answer,
                list(s.meta["values"]), s.meta)
    s = NP.make_pair_sample(rng, kind=pair_kind, heldout=heldout, split=split, tok=tok,
                            protocol="paper", form=form, **BASE)
    asked = [(c - 1, f) for c, f in zip(s.meta["asked_chunks"], s.meta["facts"], strict=True)]
    return (s.meta["documents"], asked, s.meta["question"], s.answer, list(s.meta["values"]),
            s.meta)


def _hay(rng, want: int, have: int, asked_names, values, heldout, split, tok,
         domains: set) -> list[str]:
    """Documents of further samples of the split (their domains added to `domains`) that
    neither name an asked entity nor hold an asked value, up to `want` tokens in all."""
    docs: list[str] = []
    while have < want:
        more = G.make_sample(rng, heldout=heldout, split=split, kind="single", tok=tok, **BASE)
        domains.update(more.meta["entity_domains"])
        for d in more.meta["documents"]:
            if have >= want:
                break
            if any(n in d for n in asked_names) or N.holders([d], values):
                continue
            docs.append(d)
            have += len(tok.encode(d))
    return docs


def _segment_of(segments: list[str], text: str, doc: str) -> int:
    """The 1-based segment holding `doc` (whole: documents are shorter than a segment)."""
    start = text.index(doc)
    pos = 0
    for k, seg in enumerate(segments, 1):
        pos += len(seg)
        if start < pos:
            if start + len(doc) > pos:
                raise ValueError("a document was cut across two segments")
            return k
    raise ValueError("document not in the text")


def make_long_sample(rng, *, kind: str = "single", heldout: bool = False, split: str = "train",
                     tokens: tuple[int, int] = TOKENS, tok=None, form: str = "split",
                     pair_kind: str | None = None) -> Sample:
    """One long-text sample (see the module docstring); `kind` "single" or "multi"."""
    if kind not in ("single", "multi"):
        raise ValueError(f"long-text samples are single or multi, not {kind!r}")
    tok = tok or N.tokens()
    docs, asked, q, answer, vals, meta = _base(rng, kind, heldout, split, tok, form, pair_kind)
    needles = [docs[i] for i, _ in asked]
    # The base sample's other documents, less any that holds an asked value by coincidence
    # (another domain's fact of that year): the answer sits in the asked documents alone.
    rest = [d for i, d in enumerate(docs) if i not in {j for j, _ in asked}
            and not N.holders([d], vals)]
    want = int(rng.integers(tokens[0], tokens[1] + 1))
    have = sum(len(tok.encode(d)) for d in docs)
    hay_domains: set = set()
    rest += _hay(rng, want, have, meta["targets"], vals, heldout, split, tok, hay_domains)
    rest = [rest[i] for i in rng.permutation(len(rest))]
    for _ in range(20):
        body = list(rest)
        for d in needles:
            body.insert(int(rng.integers(len(body) + 1)), d)
        text = "\n\n".join(body)
        segments = segment_context(text, tok.encode)
        where = [_segment_of(segments, text, d) for d in needles]
        if len(set(where)) == len(where):
            break
    else:
        raise ValueError("could not put the two documents into two segments")
    prompt = N.paper_user_prompt(segments, q, tok)
    parts = [(Directive(Mode.FOCUS, chunks=(k,)), f) for k, (_, f) in zip(where, asked,
                                                                           strict=True)]
    directive = Directive(Mode.FOCUS, chunks=tuple(where))
    if kind == "single" or form == "joint":
        resp, tags, _ = P.reply(tok, directive, answer)
    else:
        resp, tags, _ = P.reply_blocks(tok, parts, answer)
    texts = [N.clean_document(s) for s in segments]
    out = {**{k: v for k, v in meta.items() if k not in ("documents", "holders", "drills")},
           "documents": texts, "holders": N.holders(texts, vals), "n_chunks": len(segments),
           "long": True, "protocol": "paper", "text": text, "segments_at": where,
           "hay_domains": sorted(hay_domains),
           "segment_tokens": [len(tok.encode(s)) for s in segments]}
    first = parts[0][0] if kind == "multi" and form == "split" else directive
    return Sample(prompt, resp, tag_text(first, "paper"), directive, answer, kind,
                  tags[0][0], tuple(N.normalise(v) for v in vals), out, tags=tuple(tags))
