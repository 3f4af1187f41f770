"""Training domains: people and things (people, ships, locomotives, species, software
packages, novels, films). See nl_domains for what the fields mean."""

from da_lab.training.data import nl_words as W
from da_lab.training.data.nl_domains import Attr as A
from da_lab.training.data.nl_domains import Domain as D

SHIPYARDS = ("Harland Yard", "Clydeside Works", "Merrow Docks", "Baltic Slipway",
             "Northgate Yard", "Kessel Shipbuilders", "Greyhaven Yard", "Orrin Marine",
             "Saltmarsh Works", "Tollmouth Yard", "Eastquay Dock", "Brannock Yard",
             "Sandholm Works", "Corran Yard", "Westfleet Dock")
HABITATS = ("salt marshes", "beech woodland", "mountain streams", "coastal cliffs",
            "peat bogs", "chalk grassland", "river estuaries", "pine forest", "sand dunes",
            "reed beds", "alpine meadows", "mangrove swamps", "kelp forests", "heathland",
            "limestone caves")
DIETS = ("insects", "seeds", "small fish", "berries", "snails", "worms", "crabs", "grasses",
         "nectar", "beetles", "mice", "algae", "frogs", "shrimp", "fruit")
LANGS = ("Rust", "Python", "Go", "C", "OCaml", "Haskell", "Java", "Kotlin", "Elixir",
         "Zig", "Julia", "Scala", "Lua", "Nim", "Erlang")
LICENSES = ("the MIT licence", "the Apache 2.0 licence", "the GPL version 3", "the BSD "
            "licence", "the Mozilla Public Licence", "the LGPL", "the ISC licence",
            "the Unlicense", "the Artistic Licence", "the zlib licence", "the EUPL",
            "the Boost licence", "the CC0 dedication", "the AGPL", "the Eclipse licence")
PUBLISHERS = ("Harrow & Lane", "Blue Quill Press", "Marlowe Books", "Fenwick House",
              "Tidewater Press", "Lantern Books", "Orchard Street Press", "Greyfriars "
              "Publishing", "Kestrel Books", "Ninefold Press", "Old Mill Books",
              "Salt Road Press", "Brightwell & Co", "Ink Harbour", "Stonecrop Press")

DOMAINS = (
    D("person", "person", ("{FIRST} {SUR}",), category="living", pronoun=None,
      short_last=True, attrs=(
          A("born", "year", ("{E} was born in {V}.", "{E} was born in the year {V}."),
            (1930, 2005), pp="born"),
          A("birthplace", "place", ("{E} was born in the city of {V}.", "{E}'s birthplace "
                                    "is {V}.", "{E} was born and raised in {V}."),
            noun="birthplace", ask=(("In which city was {E} born?", "{E} was born in {V}."),)),
          A("job", "phrase", ("{E} works as a {V}.", "By profession, {E} is a {V}."),
            tuple(j for j in W.JOBS if j[0] not in "aeiou"), noun="job"),
          A("books", "count", ("{E} owns {V} books.", "{E} has a collection of {V} books."),
            (15, 4800), count="books"),
          A("mentor", "person", ("{E} trained under {V}.", "{E}'s mentor was {V}."),
            noun="mentor")),
      fillers=tuple(f.replace("{n}", "{R}") for f in W.PERSON_FILLERS[:10])),
    D("ship", "ship", ("MV {WORD}", "SS {TOWN}", "The {COL} {ANI}", "HMS {WORD}",
                       "{FIRST} {SUR}"), category="thing", attrs=(
          A("launched", "date", ("{E} was launched on {V}.", "{E} first took to the water on "
                                 "{V}."), (1890, 2021), pp="launched"),
          A("captain", "person", ("The captain of {E} is {V}.", "{E} sails under Captain "
                                  "{V}.", "{V} commands {E}."), noun="captain"),
          A("length", "quantity", ("{E} is {V} long.", "From bow to stern {E} measures {V}."),
            (18, 390, 0, ("metres", "m")), noun="length", adj="long"),
          A("crew", "count", ("{E} carries a crew of {V}.", "{V} sailors serve on {E}."),
            (4, 1800), count="crew members"),
          A("port", "place", ("{E} is registered in {V}.", "The home port of {E} is {V}."),
            noun="home port"),
          A("yard", "phrase", ("{E} was built at {V}.", "{V} built {E}."), SHIPYARDS,
            noun="shipyard")),
      fillers=("{R} once rescued the crew of a fishing boat.", "{R} is painted dark blue "
               "below the waterline.", "{R} was refitted in {#y}.", "{R} can reach {#10-30} "
               "knots in calm seas.")),
    D("locomotive", "locomotive", ("{WORD} Class", "No. {NUM} {COL} {ANI}",
                                   "The {TOWN} Flyer", "{SUR} Express"), category="thing",
      attrs=(
          A("built", "year", ("{E} was built in {V}.", "{E} left the works in {V}."),
            (1830, 2015), pp="built"),
          A("designer", "person", ("{E} was designed by {V}.", "The designer of {E} was {V}."),
            noun="designer", pp="designed", past="designed"),
          A("speed", "quantity", ("{E} reaches {V}.", "The top speed of {E} is {V}."),
            (40, 320, 0, ("km/h", "miles per hour")), noun="top speed"),
          A("weight", "quantity", ("{E} weighs {V}.", "In working order {E} weighs {V}."),
            (20, 160, 0, ("tonnes",)), noun="weight"),
          A("depot", "place", ("{E} is kept at the depot in {V}.", "{E} is based in {V}."),
            loc="based"),
          A("number", "count", ("{V} engines of {E} were built.", "The works built {V} of "
                                "{E}."), (1, 900),
            ask=(("How many of {E} were built?", "{V} of {E} were built."),
                 ("How many engines of {E} were built?", "{V} engines of {E} were built.")))),
      fillers=("{R} is painted in its original livery.", "{R} appears in an old "
               "newsreel.", "{R} hauled its last passenger train in {#y}.",
               "Rebuilding {R} took {#2-14} years.")),
    D("species", "species", ("{COL} {ANI}", "{WORD} {ANI}", "Lesser {COL} {ANI}",
                             "{TOWN} {ANI}"), category="living", attrs=(
          A("length", "quantity", ("{E} grows to {V}.", "An adult {N} measures {V}."),
            (2, 240, 0, ("cm", "centimetres")), noun="length"),
          A("weight", "quantity", ("{E} weighs about {V}.", "A grown {N} weighs {V}."),
            (5, 9000, 0, ("grams", "g")), noun="weight"),
          A("habitat", "phrase", ("{E} lives in {V}.", "The usual home of {E} is {V}."),
            HABITATS, noun="habitat"),
          A("diet", "phrase", ("{E} feeds on {V}.", "{E} mostly eats {V}."), DIETS,
            noun="diet"),
          A("described", "year", ("{E} was first described in {V}.", "Scientists described "
                                  "{E} in {V}."), (1750, 2015), pp="first described"),
          A("describer", "person", ("{E} was first described by {V}.", "{V} first described "
                                    "{E}."), noun="discoverer")),
      fillers=("{R} is most active at dawn.", "{R} is shy and rarely seen.", "A survey in "
               "{#y} counted {#100-9000} of them.", "{R} can live for {#2-30} years.")),
    D("software", "package", ("{WORD}", "{WORD}DB", "lib{WORD}", "{WORD}.js", "{WORD}kit"),
      category="thing", attrs=(
          A("released", "date", ("{E} was first released on {V}.", "The first version of "
                                 "{E} came out on {V}."), (1995, 2023), pp="first released"),
          A("maintainer", "person", ("{E} is maintained by {V}.", "The lead maintainer of "
                                     "{E} is {V}."), noun="lead maintainer"),
          A("language", "phrase", ("{E} is written in {V}.", "Most of the code of {E} is in {V}."),
            LANGS, noun="programming language"),
          A("license", "phrase", ("{E} is released under {V}.", "{E} uses {V}."), LICENSES,
            noun="licence"),
          A("contributors", "count", ("{E} has {V} contributors.", "So far {V} people have "
                                      "contributed to {E}."), (2, 4000),
            count="contributors")),
      fillers=("{R} has a plugin system.", "{R} runs on Linux, macOS and Windows.",
               "Version {#2-9}.{#0-9} of {R} fixed a memory leak.", "{R} was rewritten in "
               "{#y}.")),
    D("novel", "novel", ("The {COL} {ANI}", "A {TREE} in {TOWN}", "The {SUR} Affair",
                         "{WORD}", "Night over {TOWN}"), category="thing", attrs=(
          A("author", "person", ("{E} was written by {V}.", "The author of {E} is {V}."),
            noun="author", pp="written", ask=(("Who wrote {E}?", "{V} wrote {E}."),)),
          A("published", "year", ("{E} was published in {V}.", "{E} first appeared in {V}."),
            (1850, 2023), pp="published"),
          A("pages", "count", ("{E} has {V} pages.", "{E} runs to {V} pages."), (90, 1200),
            count="pages"),
          A("publisher", "phrase", ("{E} was published by {V}.", "{V} published {E}."),
            PUBLISHERS, noun="publisher"),
          A("setting", "place", ("{E} is set in {V}.", "The story of {E} takes place in "
                                 "{V}."), noun="setting"),
          A("price", "price", ("{E} sells for {V}.", "A copy of {E} costs {V}."),
            (6, 40, 2), noun="price", cost=True)),
      fillers=("{R} was turned into a radio play.", "{R} begins on a rainy morning.",
               "{R} sold {#2000-90000} copies in its first year.", "A new edition of {R} "
               "appeared in {#y}.")),
    D("film", "film", ("The {COL} {ANI}", "{TOWN} Nights", "Return to {TOWN}",
                       "The {SUR} Letters", "{WORD}"), category="thing", attrs=(
          A("director", "person", ("{E} was directed by {V}.", "The director of {E} is {V}."),
            noun="director", pp="directed", past="directed"),
          A("released", "year", ("{E} was released in {V}.", "{E} came out in {V}."),
            (1920, 2023), pp="released"),
          A("runtime", "quantity", ("{E} runs for {V}.", "{E} lasts {V}."),
            (70, 220, 0, ("minutes",)), noun="running time"),
          A("budget", "price", ("{E} was made for {V}.", "The budget of {E} was {V}."),
            (20000, 9000000, 0), noun="budget"),
          A("star", "person", ("{E} stars {V}.", "The lead role in {E} is played by {V}."),
            noun="lead actor"),
          A("location", "place", ("{E} was filmed in {V}.", "Most of {E} was shot in {V}."),
            noun="filming location")),
      fillers=("{R} opens with a long train journey.", "{R} won an award at a small "
               "festival.", "{R} was restored in {#y}.", "Shooting {R} took {#20-200} days.")),
)
