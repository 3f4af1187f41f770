"""Two-document questions (issue 58): the weak spot of SmolLM2-DA (0.70 in the paper's format
on the project's own sets, 0 of 9 on a set written outside the project).

Two kinds, both with answers copied from the documents:

    pair    one attribute of two entities of one domain (nl_gen's "multi"): "When was Harrow
            Bridge opened, and when was Kilbride Bridge opened?"
    cross   two attributes of two entities of *different* domains: "Who is the head coach of
            Kilbride Albion, and when was Harrow Bridge opened?"; each entity comes with its
            near duplicates (nl_gen._entities), and no other entity of either asked domain
            shares an asked value

Replies. In the card's dialect one tag names both documents (`<focus C2,C9> The head coach of
Kilbride Albion is Mara Olsen, and Harrow Bridge was opened in 1931.`). In the paper's, as its
Section 2 example does, one focus block per fact, in the question's order, each stating its
fact in one sentence while only its own Magic Chunk is visible, then the answer under LOCAL:

    <focus magic_chunks="9">The head coach of Kilbride Albion is Mara Olsen.</focus>
    <focus magic_chunks="2">Harrow Bridge was opened in 1931.</focus>
    <local><answer>The head coach of Kilbride Albion is Mara Olsen, and Harrow Bridge was
    opened in 1931.</answer></local>

(`form="joint"` writes nl_paper's one block `<focus magic_chunks="2,9">` instead.) The sample's
directive is FOCUS on both documents (what `da-lab eval` compares with the union of the focus
blocks a reply opens, evaluate.answer_text). Domains, names and values come from the split
asked for, exactly as nl_gen draws them, so held-out domains stay held out.
"""

from __future__ import annotations

from da_lab.core.tags import Directive, Mode, tag_text
from da_lab.training.data import nl_gen as G
from da_lab.training.data import nl_paper as P
from da_lab.training.data import nl_task as N
from da_lab.training.data import nl_values as V
from da_lab.training.data.nl_docs import document
from da_lab.training.data.nl_domains import possessive, question_forms
from da_lab.training.data.task import Sample

KINDS = ("pair", "cross")
FORMS = ("split", "joint")


def _fact(rng, ent: dict, attr: str, second: bool = False) -> tuple[str, str, str, str]:
    """(question part, one-sentence fact, value as written, the fact as the second half of a
    joined sentence) for one entity's attribute; `second`: the question as the second half of
    a joined question (lower case unless it opens with the name: nl_domains.multi_forms)."""
    a = ent["dom"].attr(attr)
    q, r = V.pick(rng, question_forms(a))
    v = ent["values"][attr]["text"]
    if second and not q.startswith("{"):
        q = q[0].lower() + q[1:]
    tail = r[0].lower() + r[1:] if r.startswith(("The ", "There ")) else r

    def fill(t: str) -> str:
        return possessive(t.replace("{E}", ent["name"]).replace("{V}", v))

    fact = fill(r)
    return fill(q), fact[0].upper() + fact[1:], v, fill(tail)


def _join(first: str, second: str) -> str:
    """Two questions (or sentences) as one: "A?" + "b?" -> "A, and b?"."""
    return first[:-1] + ", and " + second


def _guard(rng, ents: list, target: dict, attr: str, heldout: bool) -> None:
    """No entity but `target` has target's value of `attr`, in any of its attributes (a
    novel published in the year a locomotive was built would hold a second answer)."""
    want = N.normalise(target["values"][attr]["text"])
    for e in ents:
        if e is target:
            continue
        for a in e["dom"].attrs:
            for _ in range(20):
                if N.normalise(e["values"][a.key]["text"]) != want:
                    break
                e["values"][a.key] = V.draw(rng, a.kind, a.spec, heldout)


def entities(rng, kind: str, split: str, heldout: bool, n: int):
    """(entities: the two asked first, [(entity, attribute) asked, in order])."""
    doms = G.domains(split)
    if kind == "pair":
        asked = V.pick(rng, doms)
        attr = V.pick(rng, asked.attrs).key
        ents = G._entities(rng, doms, n, asked, attr, 2, heldout)
        for target in ents[:2]:
            _guard(rng, ents, target, attr, heldout)
        return ents, [(ents[0], attr), (ents[1], attr)]
    da = V.pick(rng, doms)
    db = V.pick(rng, [d for d in doms if d is not da])
    aa, ab = V.pick(rng, da.attrs).key, V.pick(rng, db.attrs).key
    left = G._entities(rng, doms, max(2, n // 2), da, aa, 1, heldout)
    right = G._entities(rng, doms, max(2, n - n // 2), db, ab, 1, heldout)
    names = {e["name"] for e in left}
    right = [e for e in right if e["name"] not in names or e is right[0]]
    if right[0]["name"] in names:
        return None
    ents = [left[0], right[0], *left[1:], *right[1:]]
    for target, attr in ((left[0], aa), (right[0], ab)):
        _guard(rng, ents, target, attr, heldout)
    return ents, [(left[0], aa), (right[0], ab)]


def texts(rng, ents: list, chunk_of: list[int], asked: list, budget: int) -> list[str]:
    """The documents in chunk order; an asked domain's entities state its asked attribute,
    and no filler sentence holds an asked value of any entity of an asked domain."""
    must = {id(e["dom"]): attr for e, attr in asked}
    forbid = {N.normalise(e["values"][attr]["text"]) for t, attr in asked for e in ents
              if e["dom"] is t["dom"]}
    out, used = [], {}
    for i in sorted(range(len(ents)), key=lambda i: chunk_of[i]):
        e = ents[i]
        others = [o["name"] for o in ents if o is not e and o["dom"] is e["dom"]]
        b = max(30, int(budget * (0.6 + 0.8 * rng.random())))
        out.append(document(rng, e["dom"], e, b, must=must.get(id(e["dom"])), forbid=forbid,
                            others=others, used=used))
    return out


def reply(tok, parts: list[tuple[Directive, str]], answer: str, protocol: str, form: str):
    """(ids ending in EOS, tag effects, text) of a two-document reply (see the docstring)."""
    both = Directive(Mode.FOCUS, chunks=tuple(c for d, _ in parts for c in d.chunks))
    if protocol == "card":
        tag = tag_text(both)
        ids = tok.encode(tag)
        effects = [(len(ids) - 1, both)]
        ids += tok.encode(" " + answer) + [tok.eos_id]
        return ids, effects, tag + " " + answer
    if form == "joint":
        return P.reply(tok, both, answer)
    return P.reply_blocks(tok, parts, answer)


def make_pair_sample(rng, *, kind: str | None = None, heldout: bool = False,
                     split: str = "train", n_chunks=None, context=None, tok=None,
                     protocol: str = "paper", form: str = "split") -> Sample:
    """One two-document sample (see the module docstring)."""
    if protocol not in ("card", "paper") or form not in FORMS:
        raise ValueError(f"protocol {protocol!r} / form {form!r}: card|paper, split|joint")
    tok = tok or N.tokens()
    kind = kind or V.pick(rng, KINDS)
    if kind not in KINDS:
        raise ValueError(f"unknown two-document kind {kind!r} ({', '.join(KINDS)})")
    n, budget = G._size(rng, n_chunks or (4, G.CHUNKS[1]), context)
    got = None
    while got is None:
        got = entities(rng, kind, split, heldout, max(4, n))
    ents, asked = got
    n = len(ents)
    chunk_of = [int(c) + 1 for c in rng.permutation(n)]
    facts = [_fact(rng, e, attr, second=k == 1) for k, (e, attr) in enumerate(asked)]
    q = V.pick(rng, G.PREFIXES) + _join(facts[0][0], facts[1][0])
    answer = _join(facts[0][1], facts[1][3])
    vals = [f[2] for f in facts]
    build = N.paper_user_prompt if protocol == "paper" else N.user_prompt
    while True:
        docs = texts(rng, ents, chunk_of, asked, budget)
        try:
            prompt = build(docs, q, tok)
            break
        except ValueError:
            budget = max(30, int(budget * 0.85))
    parts = [(Directive(Mode.FOCUS, chunks=(chunk_of[i],)), facts[i][1]) for i in range(2)]
    resp, tags, _ = reply(tok, parts, answer, protocol, form)
    directive = Directive(Mode.FOCUS, chunks=(chunk_of[0], chunk_of[1]))
    cands = sorted({N.normalise(e["values"][attr]["text"]) for t, attr in asked for e in ents
                    if e["dom"] is t["dom"]})
    wrong = sorted({e["values"][attr]["text"] for t, attr in asked for e in ents
                    if e["dom"] is t["dom"] and e is not t})
    meta = {"question": q, "domain": asked[0][0]["dom"].key, "attr": asked[0][1],
            "pair_kind": kind, "form": form if protocol == "paper" else "joint",
            "asked": [[e["dom"].key, attr] for e, attr in asked], "values": vals,
            "candidates": cands, "n_chunks": n, "heldout": heldout, "split": split,
            "protocol": protocol, "names": [e["name"] for e in ents],
            "targets": [e["name"] for e, _ in asked],
            "entity_domains": [e["dom"].key for e in ents], "documents": list(docs),
            "holders": N.holders(docs, vals), "wrong_texts": wrong,
            "facts": [f[1] for f in facts], "asked_chunks": [chunk_of[0], chunk_of[1]]}
    return Sample(prompt, resp, tag_text(parts[0][0] if protocol == "paper" and
                                         form == "split" else directive, protocol),
                  directive, answer, "multi", tags[0][0], tuple(N.normalise(v) for v in vals),
                  meta, tags=tuple(tags) if protocol == "paper" else ())
