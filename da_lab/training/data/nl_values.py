"""Names and values of the generalising retrieval task (`nl_gen`): the shared name pools that
domains' name templates draw from, and values of every attribute kind, each with a near
neighbour (a distractor: close, but different).

Every pool is split in two (`nl_words.split`: every third item held out), so prompts of the
held-out stream use names and values that training never drew; a third of training's person
names are invented (`invented`), so that copying, not recall, writes them. Numbers are drawn
from ranges and printed as documents print them: "12,400" or "12400", "412 metres" or "412 m",
"£12.50" or "12.50 euros", "14 March 1998" or "March 14, 1998".
"""

from __future__ import annotations

import re
from functools import lru_cache

from da_lab.training.data import nl_words as W

MORE_FIRST = tuple("""
Amelia Omar Priya Kenji Ingrid Tariq Sunita Mateo Yara Dmitri Chloe Arjun Leila Casimir Noor
Bianca Rahul Astrid Kwame Elif Magnus Zainab Pietro Hana Idris Solveig Teodor Mei Rohan Fatima
Ewan Marta Anders Keiko Luca Nadia Oren Petra Quentin Rania Sven Tamsin Uma Wendell Xenia
Yusuf Zofia Benedikt Carys Dorian Esme Florin Gwen Hector Imogen Joaquin Kira Lorcan Mirela
""".split())
MORE_SUR = tuple("""
Achebe Bianchi Chowdhury Delacroix Eriksen Fontaine Gallagher Horvath Iwata Jovanovic Kaplan
Lacroix Mbeki Nilsson Okafor Pacheco Quispe Rasmussen Schuster Toivonen Urquhart Vasquez
Wojcik Xu Yilmaz Zeller Abernathy Brennan Costa Duarte Eastwood Farrow Grieve Hollis Ito
Jansen Kerr Llewellyn Mahler Navarro Oyelaran Pritchard Quaid Rourke Stavros Thorne Ueda
Voss Whitaker Yates Zamora Arkwright Bellamy Caddick Dunmore Elphick Fairbairn Gorski
""".split())
MORE_CITIES = tuple("""
Oslo Stockholm Copenhagen Helsinki Reykjavik Brussels Ghent Liege Lille Strasbourg Nice
Montpellier Grenoble Bologna Florence Verona Palermo Bari Trieste Ljubljana Bratislava Brno
Wroclaw Gdansk Poznan Lodz Debrecen Timisoara Cluj Sofia Plovdiv Thessaloniki Athens Patras
Izmir Edinburgh Aberdeen Belfast Galway Limerick York Norwich Exeter Plymouth Swansea Basel
Lausanne Bern Innsbruck Linz Bremen Hanover Stuttgart Nuremberg Freiburg Malmo Odense Turku
Kaunas Tartu Coimbra Braga Faro Granada Malaga Zaragoza Cadiz Salamanca
""".split())

POOLS_RAW = {
    "FIRST": W.FIRST_NAMES + MORE_FIRST,
    "SUR": W.SURNAMES + MORE_SUR,
    "STEM": W.TOWN_STEMS,
    "COL": tuple("""Red Blue Green Amber Crimson Silver Golden Scarlet Violet Indigo Ivory
        Copper Jade Ochre Saffron Cobalt Emerald Russet Slate Azure Coral Ebony""".split()),
    "ANI": tuple("""Falcon Heron Otter Fox Badger Raven Lynx Stag Kestrel Hare Wolf Bear Owl
        Swan Osprey Marten Wren Beaver Bison Puffin Stoat Curlew Eagle Seal""".split()),
    "TREE": tuple("""Oak Willow Birch Rowan Alder Hazel Elm Ash Beech Cedar Yew Linden
        Maple Holly Juniper Larch Poplar Aspen Spruce Hawthorn""".split()),
    "GREEK": tuple("""Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Lambda Sigma
        Tau Omega Rho Phi""".split()),
    "SYL": tuple("""Vel Kor Ami Bra Cel Dor Ela Fen Gal Hal Iso Jun Kal Lum Mir Nov Ori Pax
        Qui Ral Sol Tav Umb Ver Wyn Xan Yor Zel Aro Bel Cas Dri Esk Fal Gri""".split()),
}
SYL2 = ("tra", "nis", "ora", "vex", "lin", "dar", "mos", "ken", "ria", "tus", "bel", "gon",
        "wen", "rix", "mar", "dis")
MONTHS = ("January February March April May June July August September October November "
          "December").split()
SLOT = re.compile(r"\{(FIRST|SUR|TOWN|COL|ANI|TREE|GREEK|WORD|NUM)\}")
NUMBER = re.compile(r"\{#(\d+)-(\d+)\}|\{#y\}|\{#p\}")


@lru_cache(maxsize=2)
def pools(heldout: bool) -> dict[str, tuple[str, ...]]:
    """The name and value pools of one side of the split (held-out or training)."""
    p = {k: W.split(v, heldout) for k, v in POOLS_RAW.items()}
    p["CITY"] = W.split(W.CITIES + MORE_CITIES, heldout)
    return p


def pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


# ---------------------------------------------------------------------------------------------
# Names

def _slot(rng, slot: str, p: dict, like: str | None = None) -> str:
    """One slot value; with `like`, a near neighbour of it (a town of the same stem, a word
    of the same first syllable, else any other value)."""
    if slot == "TOWN":
        if like is not None:
            stem = next((s for s in POOLS_RAW["STEM"] if like.startswith(s)), None)
            if stem is not None:
                return stem + pick(rng, [x for x in W.TOWN_SUFFIXES if stem + x != like])
        return pick(rng, p["STEM"]) + pick(rng, W.TOWN_SUFFIXES)
    if slot == "WORD":
        if like is not None:
            first = next((s for s in POOLS_RAW["SYL"] if like.startswith(s)), like[:3])
            return first + pick(rng, [x for x in SYL2 if first + x != like])
        return pick(rng, p["SYL"]) + pick(rng, SYL2)
    if slot == "NUM":
        return str(int(rng.integers(2, 40)))
    pool = [x for x in p[slot] if x != like]
    return pick(rng, pool)


def name(rng, templates: tuple[str, ...], p: dict, like: dict | None = None) -> dict:
    """{"text": name, "template": i, "slots": [values]}; with `like` (another such dict), a
    near duplicate: the same template (or another with the same slots) with one slot redrawn
    as its near neighbour."""
    if like is None:
        i = int(rng.integers(len(templates)))
        slots = [_slot(rng, s, p) for s in SLOT.findall(templates[i])]
    else:
        i, slots = like["template"], list(like["slots"])
        same = [j for j, t in enumerate(templates) if j != i
                and SLOT.findall(t) == SLOT.findall(templates[i])]
        if same and (not slots or rng.random() < 0.3):
            i = pick(rng, same)
        elif slots:
            k = int(rng.integers(len(slots)))
            slots[k] = _slot(rng, SLOT.findall(templates[i])[k], p, like=slots[k])
    it = iter(slots)
    return {"text": SLOT.sub(lambda m: next(it), templates[i]), "template": i, "slots": slots}


# ---------------------------------------------------------------------------------------------
# Values

def fmt_int(rng, n: int) -> str:
    return f"{n:,}" if n >= 1000 and rng.random() < 0.5 else str(n)


def _fmt_num(rng, x: float, decimals: int) -> str:
    return fmt_int(rng, int(round(x))) if decimals == 0 else f"{x:.{decimals}f}"


def _num(rng, lo: float, hi: float, decimals: int, near: float | None) -> float:
    if near is None:
        x = lo + (hi - lo) * rng.random()
    else:
        f = 1 + (0.04 + 0.16 * rng.random()) * (1 if rng.random() < 0.5 else -1)
        x = min(hi, max(lo, near * f))
        if abs(x - near) < 10 ** -decimals:
            x = near + (1 if near < hi else -1) * max(1, 10 ** -decimals)
    return round(x, decimals) if decimals else float(int(round(x)))


def _price(rng, x: str) -> str:
    style = int(rng.integers(5))
    return ("£" + x, "$" + x, "€" + x, x + " euros", x + " dollars")[style]


def _date(rng, lo: int, hi: int, near: dict | None) -> dict:
    if near is None:
        d = {"y": int(rng.integers(lo, hi + 1)), "m": int(rng.integers(12)),
             "d": int(rng.integers(1, 29))}
    elif rng.random() < 0.5:
        d = dict(near, d=(near["d"] + int(rng.integers(1, 27))) % 28 + 1)
    else:
        d = dict(near, y=near["y"] + int(rng.integers(1, 4)) * (1 if rng.random() < .5 else -1))
    return d


_REAL_NAMES = frozenset(POOLS_RAW["FIRST"] + POOLS_RAW["SUR"])
# Invented name parts (training only): with a pool of ~200 real names the model learned their
# spellings rather than copying, and on held-out names wrote "Jakub Xu" for Jakob Xu. A name
# it cannot know must be copied letter by letter from the document.
P_INVENTED = 0.35
ONSETS = ("b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "kr", "l", "m", "n",
          "p", "pl", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z")
VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "y", "ae")
CODAS = ("", "", "", "n", "r", "l", "s", "k", "m", "th", "nd", "sk")


def invented(rng) -> str:
    """A pronounceable name part no pool holds: two or three syllables ("Zerkae")."""
    while True:
        parts = [pick(rng, ONSETS) + pick(rng, VOWELS) + pick(rng, CODAS)
                 for _ in range(2 + int(rng.random() < 0.4))]
        word = "".join(parts).capitalize()
        if word not in _REAL_NAMES:     # never a held-out name by chance
            return word


def _person_part(rng, pool: tuple[str, ...], heldout: bool, avoid: str | None = None) -> str:
    if not heldout and rng.random() < P_INVENTED:
        while (word := invented(rng)) == avoid:   # a neighbour must differ
            pass
        return word
    return pick(rng, [x for x in pool if x != avoid])


def draw(rng, kind: str, spec, heldout: bool, near: dict | None = None) -> dict:
    """A value {"text": as written, "raw": what a near neighbour is drawn around}."""
    p = pools(heldout)
    r = None if near is None else near["raw"]
    if kind == "person":
        if r is None:
            raw = (_person_part(rng, p["FIRST"], heldout), _person_part(rng, p["SUR"], heldout))
        elif rng.random() < 0.5:
            raw = (r[0], _person_part(rng, p["SUR"], heldout, avoid=r[1]))
        else:
            raw = (_person_part(rng, p["FIRST"], heldout, avoid=r[0]), r[1])
        return {"text": f"{raw[0]} {raw[1]}", "raw": raw}
    if kind in ("place", "phrase"):
        pool = p["CITY"] if spec is None else W.split(tuple(spec), heldout)
        raw = pick(rng, [x for x in pool if x != r])
        return {"text": raw, "raw": raw}
    if kind == "year":
        lo, hi = spec
        if r is None:
            raw = int(rng.integers(lo, hi + 1))
        else:
            d = int(rng.integers(1, max(3, (hi - lo) // 25) + 1))
            raw = r + d if r + d <= hi else r - d
        return {"text": str(raw), "raw": raw}
    if kind == "date":
        raw = _date(rng, *spec, near=r)
        m = MONTHS[raw["m"]]
        text = (f"{raw['d']} {m} {raw['y']}" if rng.random() < 0.6
                else f"{m} {raw['d']}, {raw['y']}")
        return {"text": text, "raw": raw}
    if kind == "count":
        lo, hi = spec
        raw = _num(rng, lo, hi, 0, r)
        return {"text": fmt_int(rng, int(raw)), "raw": raw}
    if kind == "quantity":
        lo, hi, dec, units = spec
        raw = _num(rng, lo, hi, dec, r)
        return {"text": f"{_fmt_num(rng, raw, dec)} {pick(rng, units)}", "raw": raw}
    if kind == "price":
        lo, hi, dec = spec
        raw = _num(rng, lo, hi, dec, r)
        return {"text": _price(rng, _fmt_num(rng, raw, dec)), "raw": raw}
    raise ValueError(f"unknown value kind {kind!r}")


def fill_numbers(rng, text: str) -> str:
    """A filler's number slots: {#a-b} an integer in [a, b], {#y} a year, {#p} a price."""
    def one(m):
        if m.group(0) == "{#y}":
            return str(int(rng.integers(1900, 2024)))
        if m.group(0) == "{#p}":
            return _price(rng, f"{int(rng.integers(2, 400))}")
        return fmt_int(rng, int(rng.integers(int(m.group(1)), int(m.group(2)) + 1)))
    return NUMBER.sub(one, text)
