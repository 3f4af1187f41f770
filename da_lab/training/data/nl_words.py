"""Word pools and sentence templates of the natural-language retrieval task (`nl_task`).

Entity names (people's first names and surnames, town-name stems) are split in two: training
draws from one part and held-out prompts from the other (`split`), so an eval measures the
skill, not memorised names. Values (years, cities, jobs, rivers, numbers) are shared.
"""

from __future__ import annotations

FIRST_NAMES = tuple("""
Mara Jonas Ilse Tomas Greta Anton Lena Pavel Sofia Emil Nora Viktor Ada Felix Irene Oskar
Clara Hugo Elena Matteo Vera Lukas Alma Rafael Ida Simon Freya Bruno Maya Leon Hanna Marco
Selma Julian Rosa Dario Liv Aaron Carla Milan Agnes Tobias Elsa Karim Nina Vincent Thea Samuel
Lotte Henrik Olga Stefan Amira Jakob Paula Erik Zora Adrian Wilma Gustav
""".split())

SURNAMES = tuple("""
Olsen Brandt Keller Novak Varga Lindqvist Moreau Petrov Castell Weber Dalton Hale Romero
Falk Sorensen Whitby Kowalski Marsh Janssen Ortega Berg Fischer Holm Rossi Quinn Stroud
Lambert Nyberg Carvalho Ashford Meyer Tanaka Blom Ferreira Haas Kovac Lund Barrow Dumont
Ibsen Vogel Pereira Strand Mercer Holt Nakamura Frost Sandberg Engel Moretti Kirby Wolff
Lindgren Hartley Sato Ekberg Winther Rowe Castillo Pike
""".split())

TOWN_STEMS = tuple("""
Bram Ash Kel Dun Hal Thorn Wen Mar Elm Cal Har Lin Ox Rad Sel Stan Wick Bel Cor Dal Fen
Gil Hol Ket Lam Mor Nor Pen Quel Ros Sax Tal Ul Vor Wal Yar Brack Crom Dray Ever Frel
Glen Hart Ivel Jor Kin Lor Mel
""".split())
TOWN_SUFFIXES = ("wick", "ford", "by", "ton", "ham", "mere", "field", "stead", "holm", "bury")

CITIES = tuple("""
Lisbon Porto Madrid Seville Lyon Marseille Bordeaux Hamburg Munich Leipzig Vienna Prague
Krakow Warsaw Budapest Zagreb Milan Turin Naples Genoa Zurich Geneva Antwerp Utrecht
Rotterdam Aarhus Bergen Gothenburg Uppsala Tampere Tallinn Riga Vilnius Dublin Cork Leeds
Glasgow Bristol Cardiff Valencia Bilbao Toulouse Nantes Dresden Cologne Salzburg Graz
""".split())

JOBS = tuple("""
pharmacist carpenter architect baker librarian nurse electrician translator veterinarian
geologist photographer plumber teacher surveyor journalist chemist gardener pilot tailor
engineer dentist locksmith cartographer florist mechanic economist editor jeweller potter
astronomer beekeeper violinist optician sculptor brewer
""".split())

RIVERS = tuple("""
Elde Ouse Tamar Wye Lune Arne Derwent Kennet Esk Nidd Tees Frome Avon Ure Calder Wear
Dove Hodder Irwell Swale Tavy Fowey Camel Lyn Exe Otter Axe Brue Parrett Cherwell Windrush
Evenlode Colne Lea Mole Wey Medway Stour Orwell Deben Alde
""".split())

# Sentences that pad a paragraph with prose and hold nothing a question asks about.
PERSON_FILLERS = (
    "{n} likes to walk along the coast on Sunday mornings.",
    "{n} learned to play the violin as a child and still practises on weekends.",
    "Friends describe {n} as patient, curious and very punctual.",
    "{n} spends most summers repairing an old sailing boat.",
    "{n} keeps a small vegetable garden behind the house.",
    "On rainy evenings {n} reads detective novels by the window.",
    "{n} once cycled across three countries in a single month.",
    "{n} collects old maps and frames the best of them.",
    "{n} volunteers at the local library twice a month.",
    "{n} prefers tea to coffee and never drinks either after noon.",
    "{n} has a habit of writing letters instead of emails.",
    "{n} enjoys cooking large dinners for neighbours and friends.",
    "Every winter {n} takes a week off to go skiing in the mountains.",
    "{n} speaks two foreign languages and is learning a third.",
    "{n} often visits museums on the first Sunday of the month.",
    "{n} is known at work for drawing clear diagrams on the whiteboard.",
)
TOWN_FILLERS = (
    "{n} holds a busy market in its main square every Saturday.",
    "The old mill in {n} has been turned into a small museum.",
    "Visitors to {n} often praise its narrow cobbled streets.",
    "{n} is surrounded by orchards that bloom early in spring.",
    "A festival of music and lanterns takes place in {n} each autumn.",
    "The train station of {n} was rebuilt after a fire.",
    "Most houses in {n} are built from a pale local stone.",
    "{n} has a football club with a loyal following.",
    "The town hall of {n} has a clock tower that can be climbed.",
    "Fishermen in {n} sell their catch straight from the harbour.",
    "A long footpath connects {n} with the hills to the north.",
    "{n} is famous in the region for its honey cakes.",
    "Several painters have lived and worked in {n}.",
    "The public gardens of {n} are kept by volunteers.",
    "In winter the lake near {n} sometimes freezes over.",
    "{n} twinned with a town across the sea many years ago.",
)

# Attributes: (kind, attribute) -> fact sentences (variants), the question, the reply sentence
# (its answer at the end), the plural question for two entities. {n} entity, {v} value.
ATTRS = {
    ("person", "year"): (("{n} was born in {v}.", "{n} was born in the year {v}."),
                         "In which year was {n} born?", "{n} was born in {v}.",
                         "In which years were {a} and {b} born?"),
    ("person", "city"): (("{n} was born in the city of {v}.", "{n}'s birthplace is {v}."),
                         "In which city was {n} born?", "{n} was born in {v}.",
                         "In which cities were {a} and {b} born?"),
    ("person", "job"): (("{n} works as {art} {v}.", "By profession, {n} is {art} {v}."),
                        "What does {n} do for a living?", "{n} works as {art} {v}.",
                        "What do {a} and {b} do for a living?"),
    ("person", "books"): (("{n} owns {v} books.", "{n} has a collection of {v} books."),
                          "How many books does {n} own?", "{n} owns {v} books.",
                          "How many books do {a} and {b} own?"),
    ("town", "founded"): (("{n} was founded in {v}.", "The town of {n} dates from {v}."),
                          "When was {n} founded?", "{n} was founded in {v}.",
                          "When were {a} and {b} founded?"),
    ("town", "population"): (("{n} has {v} inhabitants.", "About {v} people live in {n}."),
                             "How many people live in {n}?", "{n} has {v} inhabitants.",
                             "How many people live in {a} and in {b}?"),
    ("town", "river"): (("{n} lies on the river {v}.", "The river {v} flows through {n}."),
                        "Which river flows through {n}?", "{n} lies on the river {v}.",
                        "Which rivers flow through {a} and {b}?"),
    ("town", "bridges"): (("{n} has {v} bridges.", "There are {v} bridges in {n}."),
                          "How many bridges does {n} have?", "{n} has {v} bridges.",
                          "How many bridges do {a} and {b} have?"),
}

# Local questions: answered from the question alone (the reply writes <local>).
LOCAL_ECHO = ("Please repeat this name exactly: {v}.", "The name is {v}.")
LOCAL_SUM = ("What is {x} plus {y}?", "{x} plus {y} is {v}.")


def split(pool: tuple[str, ...], heldout: bool) -> tuple[str, ...]:
    """Every third item is held out; the rest are for training (disjoint by construction)."""
    return tuple(w for i, w in enumerate(pool) if (i % 3 == 2) == heldout)
