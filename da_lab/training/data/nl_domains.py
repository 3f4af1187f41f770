"""Domains of the generalising retrieval task (`nl_gen`): what a document is about, its facts,
and the questions one can ask about them.

A `Domain` is a kind of thing documents describe (bridges, bands, hospitals, ...): how its
entities are named (templates over shared name pools), what a later sentence calls one ("the
bridge", "it"), its attributes and some filler sentences of its own. An `Attr` is one fact
about an entity: the kind of value (a person's name, a place, a year, a date, a quantity with
a unit, a price, a count, a free phrase), the value's range or pool, the sentences a document
states it with ({E} the entity, {V} the value), and the *words a question uses for it*: a noun
("head coach"), a past participle ("founded"), a counted noun ("beds"), an adjective ("long"),
a location verb ("based"). Questions and replies are built from those words by forms shared by
every domain (`question_forms`), so the reply restates the question's own words and copies the
value from the document: nothing in a reply is a fixed phrase of one domain.

The domain data lives in `domains_*.py`; `nl_gen.registry` splits them: held-out domains never
appear in training (not as asked domain, not as distractor documents).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KINDS = ("person", "place", "year", "date", "quantity", "price", "count", "phrase")


@dataclass(frozen=True)
class Attr:
    key: str
    kind: str
    facts: tuple[str, ...]            # "{E} is coached by {V}."; {E} any reference, {N} name
    spec: object = None               # value range / pool (see nl_values.draw)
    noun: str | None = None           # "head coach": "Who is the head coach of X?"
    pp: str | None = None             # "founded": "When was X founded?" / "By whom was X ..."
    past: str | None = None           # "founded" (person kind): "Who founded X?"
    count: str | None = None          # "beds": "How many beds does X have?"
    adj: str | None = None            # "long": "How long is X?"
    loc: str | None = None            # "based": "Where is X based?"
    cost: bool = False                # "How much does X cost?"
    ask: tuple[tuple[str, str], ...] = ()   # the domain's own (question, reply) pairs

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"attribute {self.key}: unknown kind {self.kind!r}")
        if not self.facts or any("{V}" not in f or ("{E}" not in f and "{N}" not in f)
                                 for f in self.facts):
            raise ValueError(f"attribute {self.key}: every fact needs {{V}} and {{E}} (any "
                             "reference) or {{N}} (the name itself)")
        if not question_forms(self):
            raise ValueError(f"attribute {self.key}: no question can ask for it")


@dataclass(frozen=True)
class Domain:
    key: str
    thing: str                        # "bridge": later sentences say "the bridge"
    names: tuple[str, ...]            # "{TOWN} Bridge", "{SUR} Footbridge" (nl_values.POOLS)
    attrs: tuple[Attr, ...]
    fillers: tuple[str, ...] = ()     # {R} the entity (any reference), {#a-b} a number, {#y}
    category: str = "thing"           # org | place | thing | living: which generic fillers fit
    pronoun: str | None = "it"        # None: later sentences use the name's last word
    short_last: bool = False          # people: "Keller" after "Mara Keller"
    titles: tuple[str, ...] = field(default=())

    def attr(self, key: str) -> Attr:
        return next(a for a in self.attrs if a.key == key)


def question_forms(a: Attr) -> list[tuple[str, str]]:
    """(question, reply) templates for one attribute, from the words it names. {E} is the
    entity's name, {V} the value as the document writes it."""
    out: list[tuple[str, str]] = []
    n = a.noun
    if n and a.kind == "person":
        out += [(f"Who is the {n} of {{E}}?", f"The {n} of {{E}} is {{V}}."),
                (f"Who is {{E}}'s {n}?", f"{{E}}'s {n} is {{V}}."),
                (f"Name the {n} of {{E}}.", f"The {n} of {{E}} is {{V}}."),
                (f"Which person is the {n} of {{E}}?", f"{{V}} is the {n} of {{E}}."),
                (f"Tell me who the {n} of {{E}} is.", f"The {n} of {{E}} is {{V}}.")]
    elif n:
        out += [(f"What is the {n} of {{E}}?", f"The {n} of {{E}} is {{V}}."),
                (f"What is {{E}}'s {n}?", f"{{E}}'s {n} is {{V}}."),
                (f"Tell me the {n} of {{E}}.", f"The {n} of {{E}} is {{V}}."),
                (f"Do you know the {n} of {{E}}?", f"The {n} of {{E}} is {{V}}."),
                (f"{{E}}: what is its {n}?", f"The {n} of {{E}} is {{V}}."),
                (f"Could you look up the {n} of {{E}}?", f"The {n} of {{E}} is {{V}}.")]
    if a.pp and a.kind in ("year", "date"):
        prep = "in" if a.kind == "year" else "on"
        out += [(f"When was {{E}} {a.pp}?", f"{{E}} was {a.pp} {prep} {{V}}.")]
        out += ([(f"In which year was {{E}} {a.pp}?", f"{{E}} was {a.pp} in {{V}}."),
                 (f"What year was {{E}} {a.pp} in?", f"{{E}} was {a.pp} in {{V}}.")]
                if a.kind == "year" else
                [(f"On what date was {{E}} {a.pp}?", f"{{E}} was {a.pp} on {{V}}."),
                 (f"What was the date when {{E}} was {a.pp}?", f"{{E}} was {a.pp} on {{V}}.")])
    if a.pp and a.kind == "person":
        out += [(f"By whom was {{E}} {a.pp}?", f"{{E}} was {a.pp} by {{V}}."),
                (f"Who was {{E}} {a.pp} by?", f"{{E}} was {a.pp} by {{V}}.")]
    if a.past and a.kind == "person":
        out += [(f"Who {a.past} {{E}}?", f"{{V}} {a.past} {{E}}.")]
    if a.count:
        c = a.count
        out += [(f"How many {c} does {{E}} have?", f"{{E}} has {{V}} {c}."),
                (f"What is the number of {c} of {{E}}?", f"{{E}} has {{V}} {c}."),
                (f"Roughly how many {c} does {{E}} have?", f"{{E}} has {{V}} {c}.")]
    if a.adj:
        out += [(f"How {a.adj} is {{E}}?", f"{{E}} is {{V}} {a.adj}.")]
    if a.loc:
        out += [(f"Where is {{E}} {a.loc}?", f"{{E}} is {a.loc} in {{V}}."),
                (f"In which place is {{E}} {a.loc}?", f"{{E}} is {a.loc} in {{V}}.")]
    if a.cost:
        out += [("How much does {E} cost?", "{E} costs {V}."),
                ("What does {E} cost?", "{E} costs {V}.")]
    return out + list(a.ask)


def generic_facts(a: Attr) -> list[str]:
    """Fact sentences in the question's own words (documents use them now and then, beside
    the domain's own phrasing)."""
    out = []
    if a.noun:
        out += [f"The {a.noun} of {{E}} is {{V}}.", f"{{E}}'s {a.noun} is {{V}}."]
        if a.kind == "person":
            out.append(f"{{V}} is the {a.noun} of {{E}}.")
    if a.pp and a.kind in ("year", "date"):
        prep = "in" if a.kind == "year" else "on"
        out += [f"{{E}} was {a.pp} {prep} {{V}}.", f"{prep.capitalize()} {{V}}, {{E}} was {a.pp}."]
    if a.pp and a.kind == "person":
        out.append(f"{{E}} was {a.pp} by {{V}}.")
    if a.count:
        out += [f"{{E}} has {{V}} {a.count}.", f"There are {{V}} {a.count} at {{E}}."]
    if a.adj:
        out.append(f"{{E}} is {{V}} {a.adj}.")
    if a.loc:
        out.append(f"{{E}} is {a.loc} in {{V}}.")
    if a.cost:
        out.append("{E} costs {V}.")
    return out


def possessive(text: str) -> str:
    """"Hares's" -> "Hares'" (a name ending in s)."""
    return re.sub(r"(?<=s)'s\b", "'", text)


def multi_forms(a: Attr) -> list[tuple[str, str]]:
    """Two entities, one attribute: (question with {A} {B}, reply with {A} {B} {VA} {VB})."""
    out = []
    for q, r in question_forms(a):
        qa = q.replace("{E}", "{A}")
        qb = q.replace("{E}", "{B}")
        ra = r.replace("{E}", "{A}").replace("{V}", "{VA}")
        rb = r.replace("{E}", "{B}").replace("{V}", "{VB}")
        if rb.startswith(("The ", "There ")):
            rb = rb[0].lower() + rb[1:]
        q2 = qb[0].lower() + qb[1:] if not qb.startswith("{") else qb
        out.append((qa[:-1] + ", and " + q2, ra[:-1] + ", and " + rb))
    if a.noun:
        r = f"The {a.noun} of {{A}} is {{VA}}, and the {a.noun} of {{B}} is {{VB}}."
        out += [(f"What is the {a.noun} of {{A}} and of {{B}}?", r),
                (f"Give the {a.noun} of both {{A}} and {{B}}.", r)]
    return out
