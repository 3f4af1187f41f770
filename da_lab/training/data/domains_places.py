"""Training domains: places (towns, rivers, bridges, parks, lakes, castles, mountains,
islands). See nl_domains for what the fields mean."""

from da_lab.training.data import nl_words as W
from da_lab.training.data.nl_domains import Attr as A
from da_lab.training.data.nl_domains import Domain as D

SEAS = ("the North Sea", "the Irish Sea", "the Baltic", "the Atlantic", "the Channel",
        "the Adriatic", "the Aegean", "the Ligurian Sea", "the Bay of Biscay", "the Celtic Sea",
        "the Skagerrak", "the Solent", "the Firth of Lorn", "the Gulf of Lyon", "the Kattegat")
RANGES = ("the Cairn Hills", "the Vesper Range", "the Graywater Fells", "the Tollen Alps",
          "the Marrow Ridge", "the Kessel Mountains", "the Long Crags", "the Orrin Massif",
          "the Pale Peaks", "the Dunmoor Heights", "the Ashen Range", "the Brecca Hills",
          "the Sorrow Fells", "the Hallam Range", "the Tarn Mountains")
FISH = ("pike", "perch", "brown trout", "char", "carp", "zander", "eel", "bream", "roach",
        "tench", "grayling", "whitefish", "salmon", "chub", "rudd")
TREES = ("oak", "beech", "lime", "chestnut", "plane", "birch", "yew", "cedar", "maple",
         "sycamore", "walnut", "hornbeam", "ash", "willow", "cherry")
STONES = ("granite", "red sandstone", "limestone", "flint", "grey slate", "brick",
          "basalt", "chalk", "marble", "gritstone", "ironstone", "dolerite", "tufa",
          "greensand", "ragstone")

DOMAINS = (
    D("town", "town", ("{TOWN}", "{TOWN} on Sea", "Upper {TOWN}", "{TOWN} Magna"),
      category="place", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "The town of {E} dates from {V}.",
                                "Records of {E} begin in {V}."), (900, 1950), pp="founded"),
          A("population", "count", ("{E} has {V} inhabitants.", "About {V} people live in "
                                    "{E}."), (1200, 96000), count="inhabitants"),
          A("river", "phrase", ("{E} lies on the river {V}.", "The river {V} flows through "
                                "{E}."), W.RIVERS, noun="river"),
          A("bridges", "count", ("{E} has {V} bridges.", "There are {V} bridges in {E}."),
            (2, 30), count="bridges"),
          A("mayor", "person", ("The mayor of {E} is {V}.", "{V} was elected mayor of {E} "
                                "last year."), noun="mayor")),
      fillers=tuple(f.replace("{n}", "{R}") for f in W.TOWN_FILLERS[:10])),
    D("river", "river", ("River {WORD}", "The {WORD} River", "River {TOWN}water",
                         "The {COL} River"), category="place", attrs=(
          A("length", "quantity", ("{E} is {V} long.", "From source to mouth {E} runs for "
                                   "{V}.", "{E} flows for {V}."), (12, 2400, 0, ("km",
                                   "kilometres", "miles")), noun="length", adj="long"),
          A("source", "place", ("{E} rises near {V}.", "The source of {E} lies close to "
                                "{V}."), noun="source"),
          A("mouth", "phrase", ("{E} flows into {V}.", "{E} reaches {V} after a long "
                                "journey."), SEAS, noun="mouth"),
          A("tributaries", "count", ("{E} has {V} tributaries.", "{V} smaller streams join "
                                     "{E}."), (2, 60), count="tributaries"),
          A("flow", "quantity", ("{E} carries {V} of water.", "The average flow of {E} is "
                                 "{V}."), (3, 4000, 0, ("cubic metres per second",)),
            noun="average flow")),
      fillers=("{R} floods its meadows most winters.", "Anglers fish {R} from early spring.",
               "A ferry crossed {R} until {#y}.", "Otters returned to {R} about {#5-30} "
               "years ago.", "{R} freezes over only in the coldest winters.")),
    D("bridge", "bridge", ("{TOWN} Bridge", "{SUR} Bridge", "{TREE} Street Bridge",
                           "{TOWN} Viaduct", "{COL} Bridge"), category="place", attrs=(
          A("length", "quantity", ("{E} is {V} long.", "{E} spans {V}.", "The deck of {E} "
                                   "measures {V}."), (20, 3000, 0, ("metres", "m")),
            noun="length", adj="long"),
          A("opened", "date", ("{E} opened on {V}.", "{E} was opened to traffic on {V}."),
            (1850, 2021), pp="opened"),
          A("engineer", "person", ("{E} was designed by {V}.", "The engineer behind {E} was "
                                   "{V}."), noun="engineer", pp="designed", past="designed"),
          A("spans", "count", ("{E} rests on {V} arches.", "{E} has {V} arches."), (1, 40),
            count="arches"),
          A("toll", "price", ("Crossing {E} costs {V}.", "The toll on {E} is {V}."),
            (1, 12, 2), noun="toll"),
          A("stone", "phrase", ("{E} is built of {V}.", "Its builders made {E} from {V}."),
            STONES, noun="building material")),
      fillers=("{R} is lit with lanterns at night.", "Cyclists must walk across {R}.",
               "{R} was closed for repairs in {#y}.", "About {#200-9000} cars cross {R} "
               "each day.")),
    D("park", "park", ("{TOWN} Park", "{SUR} Gardens", "{TREE} Park", "{COL} Meadows"),
      category="place", attrs=(
          A("area", "quantity", ("{E} covers {V}.", "{E} stretches over {V}."),
            (2, 600, 0, ("hectares", "acres")), noun="area"),
          A("opened", "year", ("{E} opened in {V}.", "{E} was laid out in {V}."), (1800, 2020),
            pp="opened"),
          A("gardener", "person", ("The head gardener of {E} is {V}.", "{V} looks after {E} "
                                   "as head gardener."), noun="head gardener"),
          A("trees", "count", ("{E} has {V} trees.", "Some {V} trees grow in {E}."),
            (50, 20000), count="trees"),
          A("tree", "phrase", ("The oldest tree in {E} is the great {V} by the gate.",
                               "{E} is famous for an old {V}."), TREES, noun="oldest tree")),
      fillers=("{R} has a bandstand near the lake.", "Dogs must be kept on a lead in parts of "
               "{R}.", "{R} closes at dusk.", "A summer concert in {R} drew {#300-9000} "
               "people.")),
    D("lake", "lake", ("Lake {WORD}", "{WORD} Water", "Lake {TOWN}", "{COL} Lake"),
      category="place", attrs=(
          A("depth", "quantity", ("{E} is {V} deep.", "At its deepest point {E} reaches "
                                  "{V}."), (4, 600, 0, ("metres", "m")), noun="depth",
            adj="deep"),
          A("area", "quantity", ("{E} covers {V}.", "The surface of {E} is {V}."),
            (1, 900, 1, ("square kilometres", "km2")), noun="surface area"),
          A("fish", "phrase", ("The most common fish in {E} is {V}.", "{E} is full of {V}."),
            FISH, noun="most common fish"),
          A("town", "place", ("The nearest town to {E} is {V}.", "{E} lies a short drive from "
                              "{V}."), noun="nearest town"),
          A("islands", "count", ("{E} has {V} islands.", "There are {V} islands in {E}."),
            (0, 40), count="islands")),
      fillers=("{R} is popular with swimmers in August.", "Boats on {R} must not use "
               "engines.", "Ice covered {R} for {#3-60} days in {#y}.",
               "A path of {#3-40} km runs around {R}.")),
    D("castle", "castle", ("{TOWN} Castle", "Castle {WORD}", "{SUR} Castle",
                           "{COL} Tower"), category="place", attrs=(
          A("built", "year", ("{E} was built in {V}.", "Work on {E} was finished in {V}.",
                              "{E} dates from {V}."), (1050, 1700), pp="built"),
          A("builder", "person", ("{E} was built by {V}.", "{V} ordered the building of {E}."),
            noun="builder", pp="built"),
          A("towers", "count", ("{E} has {V} towers.", "{V} towers rise above {E}."),
            (1, 16), count="towers"),
          A("rooms", "count", ("{E} has {V} rooms.", "Inside {E} there are {V} rooms."),
            (10, 400), count="rooms"),
          A("ticket", "price", ("Entry to {E} costs {V}.", "A ticket to {E} is {V}."),
            (4, 35, 2), noun="entry price")),
      fillers=("{R} is said to have a secret tunnel.", "Peacocks roam the lawns of {R}.",
               "{R} was besieged in {#y}.", "The moat of {R} is {#2-9} metres wide.")),
    D("mountain", "mountain", ("Mount {WORD}", "{WORD} Peak", "{TOWN} Fell", "{COL} Pike"),
      category="place", attrs=(
          A("height", "quantity", ("{E} is {V} high.", "{E} rises to {V}.", "The summit of "
                                   "{E} stands at {V}."), (300, 8800, 0, ("metres", "m",
                                   "feet")), noun="height", adj="high"),
          A("ascent", "year", ("{E} was first climbed in {V}.", "The first ascent of {E} "
                               "was in {V}."), (1780, 1990), pp="first climbed"),
          A("climber", "person", ("{V} made the first ascent of {E}.", "{E} was first "
                                  "climbed by {V}."), noun="first climber",
            ask=(("Who first climbed {E}?", "{V} first climbed {E}."),)),
          A("range", "phrase", ("{E} belongs to {V}.", "{E} is part of {V}."), RANGES,
            noun="mountain range"),
          A("huts", "count", ("{E} has {V} mountain huts.", "There are {V} huts on the slopes "
                              "of {E}."), (0, 12), count="huts")),
      fillers=("Snow lies on {R} until June.", "{R} is often hidden in cloud.",
               "A climber was rescued from {R} in {#y}.", "The path up {R} has {#5-90} "
               "bends.")),
    D("island", "island", ("{WORD} Island", "Isle of {WORD}", "{ANI} Island",
                           "{WORD}holm"), category="place", attrs=(
          A("area", "quantity", ("{E} covers {V}.", "{E} has an area of {V}."),
            (1, 2000, 1, ("square kilometres", "km2")), noun="area"),
          A("population", "count", ("{E} has {V} residents.", "About {V} people live on "
                                    "{E}."), (0, 40000), count="residents"),
          A("peak", "quantity", ("The highest point of {E} is {V} above the sea.",
                                 "{E} rises to {V} at its highest hill."),
            (10, 1400, 0, ("metres", "m")), noun="highest point"),
          A("port", "place", ("Ferries to {E} leave from {V}.", "{E} is reached by boat from "
                              "{V}."), noun="ferry port"),
          A("warden", "person", ("The island warden of {E} is {V}.", "{V} works as warden "
                                 "on {E}."), noun="warden")),
      fillers=("Puffins nest on {R} in spring.", "{R} has one shop and a post office.",
               "The ferry to {R} takes {#20-240} minutes.", "A storm cut {R} off for a week "
               "in {#y}.")),
)
