"""The generalising retrieval task for SmolLM2-DA: many domains, prose of varied shape,
paraphrased questions, answers copied from the documents.

One sample is the chat prompt `nl_task.user_prompt(documents, question)` builds (the one
notebook 06 and `da-lab eval --prompts` build: the same function) and the reply to learn:

    single (65%)  one entity's attribute      <focus C7> The head coach of Kilbride Albion is
                                              Mara Olsen.
    multi  (15%)  one attribute, two entities <focus C2,C9> X was opened in 1931, and Y was
                                              opened in 1928.
    local  (20%)  no document needed          <local> 7 times 8 is 56.   (arithmetic, general
                                              knowledge, chit-chat, rewriting: nl_local)

A prompt holds 4..32 documents (~600..6,000 tokens) about entities of several domains; each
entity asked about has 1-3 near duplicates in other documents (a shared name part, a close
value of the asked attribute), and no other entity of its domain shares its value. The reply
restates the question's own words (nl_domains.question_forms) and copies the value as the
document writes it, so no reply word belongs to one domain.

Splits: `domains="train"` draws the training domains, `domains="heldout"` the held-out ones
(nl_domains.registry: never drawn in training, not even as distractors), `domains="train+extra"`
the training domains and the training-only ones (domains_extra: `finetune --extra-domains`;
no eval set draws them, so the in-domain sets stay comparable); stream HELDOUT also
draws names and values from the held-out third of every pool (nl_values.pools). Sample i of
stream s under seed k comes from SeedSequence([k, s, i]) (task.rng_for). Training samples may
be drills (`turns` > 1): after the first reply the response goes on with a given user turn
"<global> Question: ..." (every block visible again) and another reply to learn: a drill
asks one entity's attribute (often another attribute of the entity the first question asked,
of the same kind when it has one: the head coach after the captain), the same attribute of two
entities of one domain (often near duplicates of each other), or nothing; it only asks facts its
document holds. Training draws its kinds with TRAIN_MIX (more two-document samples than the
held-out mix, the weak case); held-out prompts keep P_LOCAL / P_MULTI.
"""

from __future__ import annotations

from functools import lru_cache

from da_lab.core.tags import Directive, Mode, tag_text
from da_lab.training.data import (
    domains_extra,
    domains_heldout,
    domains_orgs,
    domains_places,
    domains_things,
)
from da_lab.training.data import nl_paper as P
from da_lab.training.data import nl_task as N
from da_lab.training.data import nl_values as V
from da_lab.training.data.nl_docs import document
from da_lab.training.data.nl_domains import multi_forms, possessive, question_forms
from da_lab.training.data.nl_local import local_question
from da_lab.training.data.task import HELDOUT, TRAIN, Sample, pick_kind, rng_for

__all__ = ["TRAIN", "HELDOUT", "EVAL_SEED", "TRAIN_MIX", "make_sample", "sample", "held_out",
           "domains"]

EVAL_SEED = 7_100_001
P_LOCAL, P_MULTI = 0.20, 0.15       # held-out prompts (the eval's mix)
TRAIN_MIX = (0.15, 0.30)            # training samples' (p_local, p_multi): finetune --mix
DRILL_LOCAL, DRILL_MULTI = 0.15, 0.35   # a drill turn's kind: no document, two, else one
DRILL_SAME_ENTITY = 0.4     # a one-document drill asks the first question's entity again
CHUNKS = (4, 32)
CONTEXT = (600, 6000)
P_SAME_DOMAIN = 0.35        # a filler entity comes from the asked domain (else any other)
PREFIXES = ("", "", "", "", "", "Quick question: ", "Please answer: ", "One thing I need: ",
            "From the documents: ", "I was wondering: ")


@lru_cache(maxsize=1)
def registry() -> tuple[dict, dict]:
    """(training domains, held-out domains), by key; checked to be disjoint."""
    train, held = _keyed(domains_orgs, domains_places, domains_things), _keyed(domains_heldout)
    both = set(train) & set(held)
    if both:
        raise ValueError(f"domains both trained on and held out: {sorted(both)}")
    return train, held


@lru_cache(maxsize=1)
def extra() -> dict:
    """The training-only domains (domains_extra), by key; disjoint from both splits."""
    ext = _keyed(domains_extra)
    both = set(ext) & set().union(*registry())
    if both:
        raise ValueError(f"training-only domains defined elsewhere too: {sorted(both)}")
    return ext


def _keyed(*mods) -> dict:
    out: dict = {}
    for mod in mods:
        for d in mod.DOMAINS:
            if d.key in out:
                raise ValueError(f"domain {d.key!r} defined twice")
            out[d.key] = d
    return out


SPLITS = ("train", "heldout", "train+extra")


def domains(split: str = "train") -> list:
    """The domains of a split: "train", "heldout" or "train+extra" (training's own draw with
    `finetune --extra-domains`)."""
    if split not in SPLITS:
        raise ValueError(f"unknown domain split {split!r} ({', '.join(SPLITS)})")
    train, held = registry()
    if split == "heldout":
        return list(held.values())
    return list(train.values()) + (list(extra().values()) if split == "train+extra" else [])


def _norm(text: str) -> str:
    return N.normalise(text)


def _entity(rng, dom, heldout: bool, names: set, like: dict | None = None) -> dict | None:
    p = V.pools(heldout)
    for _ in range(40):
        nm = V.name(rng, dom.names, p, like=None if like is None else like["nm"])
        if nm["text"] not in names:
            names.add(nm["text"])
            vals = {a.key: V.draw(rng, a.kind, a.spec, heldout) for a in dom.attrs}
            return {"dom": dom, "name": nm["text"], "nm": nm, "values": vals}
    return None


def _entities(rng, doms: list, n: int, asked, attr, targets: int, heldout: bool) -> list:
    """n entities: `targets` of the asked domain first, 1-3 near duplicates of each (close
    value of `attr`), then others (of the asked domain or any). No entity outside the
    targets shares a target's value of `attr`; the targets' values differ."""
    names: set = set()
    ents = [e for e in (_entity(rng, asked, heldout, names) for _ in range(targets)) if e]
    room = max(1, min(3, (n - targets) // max(1, targets)))   # near duplicates per target
    for t in list(ents):
        for _ in range(int(rng.integers(1, room + 1))):
            e = _entity(rng, asked, heldout, names, like=t)
            if e is not None:
                a = asked.attr(attr)
                e["values"][attr] = V.draw(rng, a.kind, a.spec, heldout, near=t["values"][attr])
                ents.append(e)
    while len(ents) < n:
        dom = asked if asked is not None and rng.random() < P_SAME_DOMAIN else V.pick(rng, doms)
        e = _entity(rng, dom, heldout, names)
        if e is not None:
            ents.append(e)
    ents = ents[:n]
    if attr is None:
        return ents
    a = asked.attr(attr)
    for _ in range(20):
        seen = [_norm(t["values"][attr]["text"]) for t in ents[:targets]]
        if len(set(seen)) == len(seen):
            break
        ents[1]["values"][attr] = V.draw(rng, a.kind, a.spec, heldout)
    taken = {_norm(t["values"][attr]["text"]) for t in ents[:targets]}
    for e in ents[targets:]:
        for _ in range(20):
            if e["dom"] is not asked or _norm(e["values"][attr]["text"]) not in taken:
                break
            e["values"][attr] = V.draw(rng, a.kind, a.spec, heldout)
    return ents


def _ask(rng, kind: str, ents: list, attr, heldout: bool) -> tuple[str, str, list[str]]:
    """(question, reply, expected values as written)."""
    if kind == "local":
        return local_question(rng, heldout)
    a = ents[0]["dom"].attr(attr)
    if kind == "multi":
        q, r = V.pick(rng, multi_forms(a))
        va, vb = (e["values"][attr]["text"] for e in ents[:2])
        q = q.replace("{A}", ents[0]["name"]).replace("{B}", ents[1]["name"])
        r = (r.replace("{A}", ents[0]["name"]).replace("{B}", ents[1]["name"])
             .replace("{VA}", va).replace("{VB}", vb))
        return V.pick(rng, PREFIXES) + possessive(q), possessive(r), [va, vb]
    q, r = V.pick(rng, question_forms(a))
    v = ents[0]["values"][attr]["text"]
    q, r = q.replace("{E}", ents[0]["name"]), r.replace("{E}", ents[0]["name"]).replace("{V}", v)
    q, r = possessive(q), possessive(r)
    return V.pick(rng, PREFIXES) + q, r[0].upper() + r[1:], [v]


def _size(rng, n_chunks, context) -> tuple[int, int]:
    lo, hi = (n_chunks, n_chunks) if isinstance(n_chunks, int) else (n_chunks or CHUNKS)
    clo, chi = (context, context) if isinstance(context, int) else (context or CONTEXT)
    target = int(rng.integers(clo, chi + 1))
    # Documents of ~50..350 tokens: as many as the range allows for that length.
    n_lo, n_hi = max(lo, -(-target // 350)), min(hi, max(lo, target // 50))
    n = int(rng.integers(min(n_lo, hi), max(min(n_lo, hi), n_hi) + 1))
    return n, max(30, (target - 140) // n - 20)


def make_sample(rng, *, heldout: bool = False, split: str = "train", kind: str | None = None,
                n_chunks=None, context=None, turns: int = 1, tok=None,
                mix: tuple[float, float] | None = None, protocol: str = "card") -> Sample:
    """One sample from `rng` (see the module docstring). `split` picks the domains, `heldout`
    the names and values; n_chunks / context are numbers or (lo, hi) ranges; `mix` is
    (p_local, p_multi), default (P_LOCAL, P_MULTI). `protocol="paper"`: the paper's Magic
    Chunk prompt and replies in its tags (nl_paper), drills included."""
    if protocol not in ("card", "paper"):
        raise ValueError(f"protocol {protocol!r}: card or paper")
    tok = tok or N.tokens()
    build = N.paper_user_prompt if protocol == "paper" else N.user_prompt
    doms = domains(split)
    n, budget = _size(rng, n_chunks, context)
    p_local, p_multi = mix or (P_LOCAL, P_MULTI)
    kind = pick_kind(rng, kind, n, p_local, p_multi)     # the records task's rule
    targets = {"local": 0, "single": 1, "multi": 2}[kind]
    asked = V.pick(rng, doms) if targets else None
    attr = V.pick(rng, asked.attrs).key if targets else None
    ents = _entities(rng, doms, n, asked, attr, targets, heldout)
    chunk_of = [int(c) + 1 for c in rng.permutation(n)]
    q, reply, vals = _ask(rng, kind, ents, attr, heldout)
    texts = _texts(rng, ents, chunk_of, attr, targets, budget)
    while True:
        try:
            prompt = build(texts, q, tok)
            break
        except ValueError:
            budget = max(30, int(budget * 0.85))
            texts = _texts(rng, ents, chunk_of, attr, targets, budget)
    directive = (Directive(Mode.LOCAL) if not targets else
                 Directive(Mode.FOCUS, chunks=tuple(chunk_of[:targets])))
    if protocol == "paper":
        resp, tags, _ = P.reply(tok, directive, reply)
        tag, written = tag_text(directive, "paper"), [True] * len(resp)
    else:
        tag = tag_text(directive)
        resp, tags, written = _response(tok, tag, directive, reply)
    drills = [_drill(rng, tok, ents, chunk_of, texts, attr, heldout, resp, tags, written,
                     protocol) for _ in range(1, turns)]
    cands = sorted({_norm(e["values"][attr]["text"]) for e in ents if e["dom"] is asked}
                   if targets else {_norm(v) for v in vals})
    meta = {"question": q, "domain": asked.key if asked else None, "attr": attr or "local",
            "values": vals, "candidates": cands, "n_chunks": n, "heldout": heldout,
            "split": split, "protocol": protocol, "names": [e["name"] for e in ents],
            "targets": [e["name"] for e in ents[:targets]],
            "entity_domains": [e["dom"].key for e in ents],
            "documents": list(texts),
            "holders": N.holders(texts, vals) if targets else [],
            "wrong_texts": sorted({e["values"][attr]["text"] for e in ents
                                   if e["dom"] is asked}) if targets else []}
    if drills:
        meta["drills"] = drills
    return Sample(prompt, resp, tag, directive, reply, kind, tags[0][0],
                  tuple(_norm(v) for v in vals), meta,
                  loss_mask=tuple(written) if turns > 1 else (),
                  tags=tuple(tags) if turns > 1 or protocol == "paper" else ())


def _texts(rng, ents, chunk_of, attr, targets, budget) -> list[str]:
    order = sorted(range(len(ents)), key=lambda i: chunk_of[i])
    asked = ents[0]["dom"] if targets else None
    forbid = ({_norm(e["values"][attr]["text"]) for e in ents if e["dom"] is asked}
              if targets else set())
    out: list[str] = []
    used: dict = {}
    for i in order:
        e = ents[i]
        others = [o["name"] for o in ents if o is not e and o["dom"] is e["dom"]]
        must = attr if e["dom"] is asked else None
        b = max(30, int(budget * (0.6 + 0.8 * rng.random())))
        out.append(document(rng, e["dom"], e, b, must=must, forbid=forbid, others=others,
                            used=used))
    return out


def _response(tok, tag: str, directive, reply: str) -> tuple[list[int], list, list[bool]]:
    tag_ids = tok.encode(tag)
    ids = tag_ids + tok.encode(" " + reply) + [tok.eos_id]
    return ids, [(len(tag_ids) - 1, directive)], [True] * len(ids)


def _holds(text: str, value: str) -> bool:
    return bool(N.holders([text], [value]))


def _drill_single(rng, ents, chunk_of, texts, asked_attr):
    """(entity index, attribute key) for a one-document drill whose document holds the fact:
    often the first question's entity again, another attribute of the same kind if it has one
    (two people, two counts in one document); None if no document holds a fact."""
    def held(i):
        e = ents[i]
        return [a for a in e["dom"].attrs
                if _holds(texts[chunk_of[i] - 1], e["values"][a.key]["text"])]

    if asked_attr is not None and rng.random() < DRILL_SAME_ENTITY:
        kind = ents[0]["dom"].attr(asked_attr).kind
        others = [a for a in held(0) if a.key != asked_attr]
        same = [a for a in others if a.kind == kind]
        if same or others:
            return 0, V.pick(rng, same or others).key
    for _ in range(8):
        i = int(rng.integers(len(ents)))
        attrs = held(i)
        if attrs:
            return i, V.pick(rng, attrs).key
    return None


def _drill_pair(rng, ents, chunk_of, texts):
    """(i, j, attribute key) for a two-document drill: two entities of one domain whose
    documents hold the attribute, with different values; a near duplicate of each other
    when one is there (they share a name part); None if no pair qualifies."""
    by_dom: dict = {}
    for i, e in enumerate(ents):
        by_dom.setdefault(e["dom"].key, []).append(i)
    groups = [g for g in by_dom.values() if len(g) >= 2]
    for _ in range(8 if groups else 0):
        g = groups[int(rng.integers(len(groups)))]
        dom = ents[g[0]]["dom"]
        attr = V.pick(rng, dom.attrs).key
        ok = [i for i in g if _holds(texts[chunk_of[i] - 1], ents[i]["values"][attr]["text"])]
        if len(ok) < 2:
            continue
        i = ok[int(rng.integers(len(ok)))]
        rest = [j for j in ok if j != i and _norm(ents[j]["values"][attr]["text"])
                != _norm(ents[i]["values"][attr]["text"])]
        part = {w for w in ents[i]["name"].split() if len(w) > 3}
        near = [j for j in rest if part & set(ents[j]["name"].split())]
        pool = near if near and rng.random() < 0.6 else rest
        if pool:
            return i, pool[int(rng.integers(len(pool)))], attr
    return None


def _drill(rng, tok, ents, chunk_of, texts, asked_attr, heldout, resp, tags,
           written, protocol: str = "card") -> dict:
    """One more question turn (given) and its reply (learned), appended in place; returns
    {"question", "reply", "chunks" (1-based, [] for none), "values" (as written)}. In the
    card's dialect the turn opens with a given <global> (its tags hold until the next); in
    the paper's, </local> has already restored GLOBAL, and the turn ends as its prompt does."""
    u = rng.random()
    pair = (_drill_pair(rng, ents, chunk_of, texts)
            if DRILL_LOCAL <= u < DRILL_LOCAL + DRILL_MULTI else None)
    one = (_drill_single(rng, ents, chunk_of, texts, asked_attr)
           if u >= DRILL_LOCAL and pair is None else None)
    if pair is not None:
        i, j, attr = pair
        q, reply, vals = _ask(rng, "multi", [ents[i], ents[j]], attr, heldout)
        d = Directive(Mode.FOCUS, chunks=(chunk_of[i], chunk_of[j]))
    elif one is not None:
        i, attr = one
        q, reply, vals = _ask(rng, "single", [ents[i]], attr, heldout)
        d = Directive(Mode.FOCUS, chunks=(chunk_of[i],))
    else:
        q, reply, vals = local_question(rng, heldout)
        d = Directive(Mode.LOCAL)
    opened, closed = tok.turn()        # the chat template's turn frame (SmolLM2's, Gemma's)
    turn = tok.encode(opened)
    if protocol == "paper":
        given = turn + tok.encode("Question: " + q + "\n\nResponse:" + closed)
        ids, t, _ = P.reply(tok, d, reply)
    else:
        g = tok.encode("<global>")
        rest = tok.encode(" Question: " + q + closed)
        tags.append((len(resp) + len(turn) + len(g) - 1, Directive(Mode.GLOBAL)))
        given = turn + g + rest
        ids, t, _ = _response(tok, tag_text(d), d, reply)
    resp += given
    written += [False] * len(given)
    tags += [(len(resp) + k, e) for k, e in t]
    resp += ids
    written += [True] * len(ids)
    return {"question": q, "reply": reply, "chunks": list(d.chunks) if d.chunks else [],
            "values": list(vals)}


def sample(seed: int, index: int, stream: int = TRAIN, split: str = "train", **kw) -> Sample:
    """Sample `index` of a stream; stream HELDOUT also uses the held-out names and values."""
    return make_sample(rng_for(seed, stream, index), heldout=stream == HELDOUT, split=split,
                       **kw)


def held_out(n: int, seed: int = EVAL_SEED, split: str = "train", **kw) -> list[Sample]:
    """n held-out samples: names and values never trained on; `split="heldout"` also
    domains never trained on."""
    return [sample(seed, i, HELDOUT, split, **kw) for i in range(n)]
