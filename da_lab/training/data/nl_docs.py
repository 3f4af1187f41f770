"""One document of the generalising task: an entity's facts written as prose of varied shape.

The facts come in any order, some joined two to a sentence; later sentences call the entity
"it", "the bridge" or (people) by surname; filler sentences carry other numbers; some
documents open with a title, some with a sentence that names nothing, some name the entity only
mid-sentence, and some mention another entity of the prompt by name. The text is sized to a
token budget (estimated from characters: SmolLM2's tokenizer makes ~4.3 characters a token on
this prose; the exact prompt length is checked when the prompt is built).
"""

from __future__ import annotations

import re

from da_lab.training.data import nl_fillers as F
from da_lab.training.data import nl_values as V
from da_lab.training.data.nl_domains import generic_facts, possessive

CHARS_PER_TOKEN = 4.3
P_TITLE, P_CONTEXT_FIRST, P_JOIN, P_OTHER, P_BREAK = 0.4, 0.25, 0.35, 0.2, 0.25
P_GENERIC_FACT = 0.25          # a fact in the question's own words (nl_domains.generic_facts)
MAX_FILLER_USES = 2            # the same filler sentence in at most two documents of a prompt
_WORD = re.compile(r"\w+")


def _ref(rng, dom, name: str, first: bool, initial: bool) -> tuple[str, str]:
    """(reference, its possessive) for one mention: the name on first mention, later the
    name, "the <thing>", a pronoun (only at a sentence's start) or a person's surname."""
    if first:
        return name, name + "'s"
    if dom.short_last:
        short = name.split()[-1]
        return (short, short + "'s") if rng.random() < 0.7 else (name, name + "'s")
    u = rng.random()
    if u < 0.35:
        return name, name + "'s"
    if initial and dom.pronoun and u < 0.7:
        return dom.pronoun, {"it": "its", "she": "her", "he": "his"}[dom.pronoun]
    return f"the {dom.thing}", f"the {dom.thing}'s"


def render(rng, template: str, dom, name: str, first: bool, value: str = "",
           other: str = "", lower_start: bool = False) -> str:
    """A template with its entity reference(s), value and other name filled in."""
    text = template.replace("{N}", name).replace("{V}", value).replace("{O}", other)
    slot = "{E}" if "{E}" in text else "{R}"
    initial = text.startswith(slot)
    ref, pos = _ref(rng, dom, name, first, initial)
    text = text.replace(slot + "'s", pos, 1).replace(slot, ref, 1)
    text = text.replace(slot + "'s", name + "'s").replace(slot, name)
    text = possessive(V.fill_numbers(rng, text))
    if lower_start and initial and not text.startswith(name):
        return text[0].lower() + text[1:]
    return text[0].upper() + text[1:]


def _names(text: str, name: str) -> bool:
    return f" {name} " in f" {' '.join(_WORD.findall(text))} " or name in text


def _clean(text: str, forbid: set[str]) -> bool:
    """No forbidden value (another entity's asked value, the answer) as whole words."""
    words = " " + " ".join(_WORD.findall(text.lower().replace(",", ""))) + " "
    return not any(f" {f} " in words for f in forbid)


def _fact(rng, a) -> str:
    generic = generic_facts(a)
    if generic and rng.random() < P_GENERIC_FACT:
        return V.pick(rng, generic)
    return V.pick(rng, a.facts)


def document(rng, dom, ent: dict, budget: int, *, must: str | None, forbid: set[str],
             others: list[str], used: dict) -> str:
    """The text of one document about `ent` ({"name", "values": {key: value dict}}), about
    `budget` tokens; the fact of attribute `must` is always in it; fillers never contain a
    value of `forbid` (normalised, whole words); `used` counts the prompt's fillers."""
    name = ent["name"]
    keys = [a.key for a in dom.attrs]
    order = [keys[i] for i in rng.permutation(len(keys))]
    if must is not None:
        order.remove(must)
        order.insert(int(rng.integers(len(order) + 1)), must)
    facts = [(_fact(rng, dom.attr(k)), ent["values"][k]["text"], k) for k in order]
    pool = list(dom.fillers) + list(F.GENERIC[dom.category])
    fillers = [pool[i] for i in rng.permutation(len(pool))]
    cap = budget * CHARS_PER_TOKEN
    title = None
    if rng.random() < P_TITLE:
        title = V.pick(rng, F.TITLES).replace("{N}", name).replace("{T}", dom.thing)
    body: list[tuple[str, str, str | None]] = list(facts)
    size = (len(title) + 1 if title else 0) + sum(len(t) + len(v) for t, v, _ in facts)
    while body and size > cap and len(body) > 1:       # drop facts to fit (not `must`)
        drop = next((i for i in range(len(body) - 1, -1, -1) if body[i][2] != must), None)
        if drop is None:
            break
        size -= len(body[drop][0]) + len(body[drop][1])
        body.pop(drop)
    if others and rng.random() < P_OTHER:
        body.insert(int(rng.integers(1, len(body) + 1)), (V.pick(rng, F.OTHER), "", None))
        size += 60
    for f in fillers:
        if size + len(f) + 8 > cap:
            break
        if used.get(f, 0) >= MAX_FILLER_USES:
            continue
        used[f] = used.get(f, 0) + 1
        body.insert(int(rng.integers(len(body) + 1)), (f, "", None))
        size += len(f) + 8
    return _write(rng, dom, name, title, body, forbid, others)


def _write(rng, dom, name: str, title: str | None, body: list, forbid: set[str],
           others: list[str]) -> str:
    """The sentences in order: the first mention by name (unless a title named it already),
    facts sometimes joined two to a sentence, fillers redrawn (then dropped) when their numbers
    hit a forbidden value."""
    out: list[str] = []
    if rng.random() < P_CONTEXT_FIRST:
        out.append(V.pick(rng, F.CONTEXT))
    named = title is not None and rng.random() < 0.5
    prev_fact = False
    for template, value, key in body:
        other = V.pick(rng, others) if "{O}" in template else ""
        for _ in range(4):
            text = render(rng, template, dom, name, not named, value, other)
            if key is not None or _clean(text, forbid):
                break
        else:
            continue
        is_fact = key is not None
        can_join = (is_fact and prev_fact and named and template.startswith("{E}")
                    and rng.random() < P_JOIN)
        if can_join:
            joined = render(rng, template, dom, name, False, value, lower_start=True)
            if not joined.startswith(name):
                out[-1] = out[-1][:-1] + ", and " + joined
                continue
        out.append(text)
        named = named or _names(text, name)
        prev_fact = is_fact
    if len(out) > 3 and rng.random() < P_BREAK:
        k = int(rng.integers(2, len(out) - 1))
        out = [" ".join(out[:k]) + "\n" + out[k]] + out[k + 1:]
    text = " ".join(out).replace(" \n", "\n")
    return (title + "\n" + text) if title else text
