"""Training-only domains (issue 40, 2026-12-07): drawn by training samples, never by an eval
set, so the in-domain sets stay the prompts every committed eval ran on (like nl_local's
GK_TRAINING). They teach what the held-out misses showed the 24 training domains do not:

- two attributes of one kind whose nouns share a word ("home stage" and "home port", "head
  gardener" and "head keeper"): the question's whole noun picks the sentence;
- small counts of "people" (towns taught "people" as thousands: "Paxlin Bread has 500
  people" for 5), and two counts in one document;
- several-word values whose first word is a modifier ("trailing wisteria"): copied whole;
- two years in one document (opened, closed).

None is a held-out domain or a hand-written set's subject, and no value pool shares an item
with a held-out domain's pools (tests/test_nl_task.py checks both). See nl_domains."""

from da_lab.training.data.nl_domains import Attr as A
from da_lab.training.data.nl_domains import Domain as D

DECORS = ("faded velvet and brass", "whitewashed oak", "painted silk panels", "green marble",
          "salvaged ship timbers", "hand-painted tiles", "smoked mirrors", "woven rush mats",
          "pale limestone", "striped wallpaper", "polished copper", "antique maps",
          "carved walnut panels", "blue delft tiles", "dark slate floors")
ROBES = ("deep green robes", "black gowns with red collars", "white surplices",
         "burgundy robes", "grey tunics", "navy robes with silver trim", "plain black",
         "cream robes", "purple stoles", "sky-blue sashes", "dark red gowns",
         "white shirts and black ties", "forest green sashes", "gold-edged capes",
         "charcoal jackets")
VENUES = ("the Corn Exchange", "St Aldric's Hall", "the Mill Chapel", "the Assembly Rooms",
          "Weavers' Hall", "the Old Schoolroom", "the Quaker Meeting House", "the Drill Hall",
          "the Guildhall", "Bridge Street Church", "the Town Hall", "the Masonic Hall",
          "the Orangery", "Granary Hall", "the Free Trade Hall")
HULLS = ("orange and blue", "bright orange", "navy with a white stripe", "dark green",
         "red and cream", "pale grey", "yellow and black", "white with red bands",
         "royal blue", "orange with grey trim", "black and gold", "sea green",
         "silver and blue", "rust red", "white and navy")
THEMES = ("railway building", "deep-sea treasure hunting", "medieval trade routes",
          "bee keeping", "space station repair", "Arctic exploration", "tea plantations",
          "castle sieges", "river barge trading", "jungle archaeology", "wine making",
          "volcano escapes", "city tram networks", "pirate smuggling", "garden design")
PIECES = ("wooden meeples", "brass coins", "glass beads", "painted dice", "tiny barrels",
          "cardboard ships", "pewter figures", "cloth tiles", "clay tokens", "metal gears",
          "ivory-coloured cubes", "plastic crowns", "resin crystals", "felt bags",
          "hexagonal tiles")
PLANTS = ("trailing wisteria", "bearded irises", "old English roses", "giant rhubarb",
          "tree ferns", "scented pelargoniums", "hardy orchids", "blue poppies",
          "white foxgloves", "dwarf tulips", "climbing hydrangeas", "black bamboo",
          "alpine gentians", "water lilies", "copper beeches")
COSTUMES = ("silver and midnight blue", "crimson silk", "ash grey linen", "gold and ivory",
            "black velvet", "sea green chiffon", "rust and ochre", "pure white tulle",
            "indigo and silver", "peach satin", "deep violet", "bronze and black",
            "pale lilac", "scarlet and cream", "slate blue")
STAGES = ("the Riverside Studio", "the Kingsway Stage", "the Old Tram Shed", "Lantern Hall",
          "the Dock Theatre", "the Glasshouse Stage", "Northgate Studio", "the Tobacco Factory",
          "the Crescent Rooms", "Hope Street Stage", "the Salt Barn", "the Pump House",
          "the Ropewalk", "Cotton Lane Studio", "the Boathouse Stage")
ORES = ("copper ore", "tin", "lead and silver", "iron ore", "coal", "slate", "fluorspar",
        "zinc", "gold-bearing quartz", "china clay", "manganese", "barytes", "graphite",
        "gypsum", "jet")
OPERATORS = ("Harbour Line Buses", "Greenway Transit", "Valley Motor Services",
             "Blue Coach Company", "Northern Road Link", "Kestrel Travel", "Moorland Buses",
             "Coastline Coaches", "Red Line Transport", "Hilltop Motors", "Westway Buses",
             "Cross County Travel", "Lakeside Omnibus", "Silverdale Coaches", "Orbit Buses")
DEPOTS = ("Station Yard", "the Canal Street depot", "Mill Lane Garage", "the Quarry Road sheds",
          "Market Square", "the Old Goods Yard", "Forge Lane", "the Harbour depot",
          "Tannery Road", "the Wharf Street garage", "Brewery Lane", "the Eastgate yard",
          "Chapel Road", "the Ropeworks depot", "Gasworks Lane")
GALLERIES = ("the Fenwick Gallery", "a private collector", "the Harbour Art Trust",
             "the National Portrait Rooms", "the Old Bank Gallery", "the Hallam Collection",
             "the city council", "the Merchant Guild", "a church in the painter's home town",
             "the Weir House Museum", "the painter's family", "the Corran Foundation",
             "the Ashdown Bequest", "a college library", "the Marlowe Gallery")
PALETTES = ("muted browns", "bright yellows", "cool blues and greys", "deep reds",
            "earthy greens", "pale pastels", "black and gold", "warm ochres",
            "silvery greys", "vivid oranges", "soft pinks", "dark umbers", "cold whites",
            "sea greens", "smoky violets")

DOMAINS = (
    D("hotel", "hotel", ("The {TOWN} Arms", "Hotel {WORD}", "The {COL} {ANI} Inn",
                         "{SUR}'s Hotel", "The {TREE} House Hotel"), category="org", attrs=(
          A("manager", "person", ("The manager of {E} is {V}.", "{V} runs {E} as general "
                                  "manager."), noun="general manager"),
          A("concierge", "person", ("The head concierge at {E} is {V}.", "Guests of {E} are "
                                    "greeted by {V}, the head concierge."),
            noun="head concierge"),
          A("opened", "year", ("{E} opened in {V}.", "{E} has taken guests since {V}."),
            (1820, 2020), pp="opened"),
          A("rooms", "count", ("{E} has {V} rooms.", "There are {V} bedrooms at {E}."),
            (8, 420), count="rooms"),
          A("suites", "count", ("{E} has {V} suites.", "Only {V} of the rooms at {E} are "
                                "suites."), (1, 12), count="suites"),
          A("decor", "phrase", ("The rooms of {E} are done in {V}.", "{E} is decorated with "
                                "{V}."), DECORS, noun="decor"),
          A("rate", "price", ("A double room at {E} costs {V} a night.", "{E} charges {V} "
                              "a night."), (45, 600, 0), noun="room rate")),
      fillers=("{R} serves breakfast until ten.", "Dogs are welcome at {R}.", "{R} was "
               "refurbished in {#y}.", "The bar at {R} stocks {#20-90} whiskies.")),
    D("choir", "choir", ("{TOWN} Choral Society", "The {TOWN} Singers", "{SUR} Chamber Choir",
                         "{COL} Voices", "{TOWN} Male Voice Choir"), category="org", attrs=(
          A("conductor", "person", ("{E} is conducted by {V}.", "The conductor of {E} is {V}."),
            noun="conductor"),
          A("accompanist", "person", ("{V} plays the piano for {E}.", "The accompanist of {E} "
                                      "is {V}."), noun="accompanist"),
          A("founded", "year", ("{E} was founded in {V}.", "{E} first sang together in {V}."),
            (1850, 2018), pp="founded"),
          A("singers", "count", ("{E} has {V} singers.", "Some {V} people sing in {E}."),
            (12, 90), count="singers"),
          A("concerts", "count", ("{E} gives {V} concerts a year.", "Each year {E} performs "
                                  "{V} concerts."), (2, 14), count="concerts"),
          A("robes", "phrase", ("{E} performs in {V}.", "The singers of {E} wear {V}."), ROBES,
            noun="concert dress"),
          A("venue", "phrase", ("{E} rehearses at {V}.", "The home venue of {E} is {V}."),
            VENUES, noun="home venue")),
      fillers=("{R} sings carols at the station every December.", "New members of {R} "
               "audition in September.", "{R} toured abroad in {#y}.", "{R} rehearses on "
               "Tuesday evenings.")),
    D("lifeboat", "lifeboat", ("The {TOWN} Lifeboat", "RNLB {FIRST} {SUR}", "{WORD} Rescue",
                               "The {COL} {ANI}"), category="thing", attrs=(
          A("coxswain", "person", ("The coxswain of {E} is {V}.", "{E} is steered by its "
                                   "coxswain, {V}."), noun="coxswain"),
          A("mechanic", "person", ("{V} keeps the engines of {E} running.", "The mechanic of "
                                   "{E} is {V}."), noun="mechanic"),
          A("crew", "count", ("{E} goes out with a crew of {V}.", "{E} has {V} crew "
                              "members."), (3, 12), count="crew members"),
          A("people", "count", ("{E} can hold {V} people.", "There is room on {E} for {V} "
                                "people."), (8, 60), count="people", ask=(
                                    ("How many people does {E} hold?", "{E} holds {V} people."),)),
          A("launched", "year", ("{E} was launched in {V}.", "{E} entered service in {V}."),
            (1950, 2022), pp="launched"),
          A("hull", "phrase", ("The hull of {E} is painted {V}.", "{E} is painted {V}."), HULLS,
            noun="hull colour"),
          A("station", "place", ("{E} is stationed at {V}.", "{E} sails from {V}."),
            loc="stationed")),
      fillers=("{R} was called out {#10-90} times last year.", "Volunteers crew {R} "
               "around the clock.", "{R} had a new engine fitted in {#y}.",
               "{R} is launched down a slipway.")),
    D("boardgame", "game", ("{WORD}", "{WORD} Quest", "The {COL} {ANI}", "Lords of {TOWN}",
                            "{TREE} and {ANI}"), category="thing", attrs=(
          A("designer", "person", ("{E} was designed by {V}.", "The designer of {E} is {V}."),
            noun="designer", pp="designed", past="designed"),
          A("illustrator", "person", ("The art of {E} is by {V}.", "{V} drew the art for {E}."),
            noun="illustrator"),
          A("players", "count", ("{E} is for up to {V} people.", "Up to {V} people can "
                                 "play {E}."), (2, 8), count="people", ask=(
                                     ("How many people can play {E}?",
                                      "{V} people can play {E}."),)),
          A("minutes", "quantity", ("A game of {E} takes {V}.", "{E} plays in about {V}."),
            (15, 240, 0, ("minutes",)), noun="playing time"),
          A("published", "year", ("{E} was published in {V}.", "{E} came out in {V}."),
            (1960, 2024), pp="published"),
          A("theme", "phrase", ("{E} is a game about {V}.", "The theme of {E} is {V}."),
            THEMES, noun="theme"),
          A("pieces", "phrase", ("{E} is played with {V}.", "The box of {E} holds {V}."),
            PIECES, noun="playing pieces")),
      fillers=("{R} won a design award in {#y}.", "A second edition of {R} fixed the rules.",
               "{R} has sold {#5-400} thousand copies.", "Fans of {R} play it online.")),
    D("garden", "garden", ("{SUR} Gardens", "The {TOWN} Physic Garden", "{TREE} Court Garden",
                           "The {COL} Garden", "{TOWN} Botanic Garden"), category="place",
      attrs=(
          A("gardener", "person", ("The head gardener of {E} is {V}.", "{V} leads the "
                                   "gardeners of {E}."), noun="head gardener"),
          A("keeper", "person", ("The head keeper of {E} is {V}.", "{V} looks after the "
                                 "glasshouses of {E} as head keeper."), noun="head keeper"),
          A("designer", "person", ("{E} was laid out by {V}.", "The designer of {E} was {V}."),
            noun="designer", pp="designed"),
          A("acres", "quantity", ("{E} covers {V}.", "The grounds of {E} cover {V}."),
            (1, 240, 0, ("acres",)), noun="size"),
          A("glasshouses", "count", ("{E} has {V} glasshouses.", "There are {V} glasshouses "
                                     "at {E}."), (1, 12), count="glasshouses"),
          A("plant", "phrase", ("{E} is famous for its {V}.", "Visitors come to {E} for the "
                                "{V}."), PLANTS, noun="best-known plant")),
      fillers=("{R} opens at nine every morning.", "Picnics are allowed in {R}.", "{R} "
               "lost {#2-60} trees in the storm of {#y}.", "A café sits by the gate of {R}.")),
    D("troupe", "troupe", ("{TOWN} Dance Theatre", "The {COL} Dance Company", "{SUR} Ballet",
                           "{WORD} Dance", "Ballet {TOWN}"), category="org", attrs=(
          A("director", "person", ("The artistic director of {E} is {V}.", "{V} leads {E} "
                                   "as artistic director."), noun="artistic director"),
          A("principal", "person", ("The principal dancer of {E} is {V}.", "{V} dances the "
                                    "leading roles for {E}."), noun="principal dancer"),
          A("founded", "year", ("{E} was founded in {V}.", "{E} gave its first show in {V}."),
            (1900, 2020), pp="founded"),
          A("dancers", "count", ("{E} has {V} dancers.", "{V} dancers belong to {E}."),
            (6, 70), count="dancers"),
          A("costume", "phrase", ("{E} dances in {V}.", "The costumes of {E} are {V}."),
            COSTUMES, noun="costume colours"),
          A("stage", "phrase", ("{E} performs at {V}.", "The home stage of {E} is {V}."),
            STAGES, noun="home stage")),
      fillers=("{R} tours every spring.", "Classes at {R} are open to children.", "{R} "
               "premiered a new work in {#y}.", "{R} rehearses for {#3-8} hours a day.")),
    D("mine", "mine", ("{TOWN} Colliery", "{SUR}'s Mine", "Wheal {WORD}", "{TOWN} Pit",
                       "The {COL} Mine"), category="place", attrs=(
          A("manager", "person", ("The manager of {E} was {V}.", "{V} managed {E}."),
            noun="mine manager"),
          A("foreman", "person", ("The foreman of {E} was {V}.", "{V} was foreman at {E}."),
            noun="foreman"),
          A("opened", "year", ("{E} opened in {V}.", "Work at {E} began in {V}."),
            (1700, 1900), pp="opened"),
          A("closed", "year", ("{E} closed in {V}.", "The last shift at {E} ended in {V}."),
            (1905, 1995), pp="closed"),
          A("depth", "quantity", ("{E} reached a depth of {V}.", "The deepest shaft of {E} "
                                  "goes down {V}."), (40, 1200, 0, ("metres", "m")),
            noun="depth"),
          A("ore", "phrase", ("{E} produced {V}.", "The miners of {E} dug {V}."), ORES,
            noun="main product"),
          A("miners", "count", ("{E} employed {V} miners.", "At its peak {E} had {V} "
                                "miners."), (20, 3000), count="miners")),
      fillers=("{R} is now a museum.", "Ponies once worked underground at {R}.", "{R} "
               "flooded in {#y}.", "The winding gear of {R} still stands.")),
    D("busroute", "route", ("Route {NUM}", "The {TOWN} Express", "The {COL} Line",
                            "Route {NUM}A"), category="thing", attrs=(
          A("operator", "phrase", ("{E} is run by {V}.", "The operator of {E} is {V}."),
            OPERATORS, noun="operator"),
          A("depot", "phrase", ("The buses of {E} are kept at {V}.", "{E} starts from "
                                "{V}."), DEPOTS, noun="depot"),
          A("stops", "count", ("{E} has {V} stops.", "Along {E} there are {V} stops."),
            (5, 70), count="stops"),
          A("length", "quantity", ("{E} is {V} long.", "From end to end {E} covers {V}."),
            (3, 90, 1, ("km", "kilometres")), noun="length", adj="long"),
          A("fare", "price", ("A single ticket on {E} costs {V}.", "The fare on {E} is {V}."),
            (1, 12, 2), noun="fare"),
          A("started", "year", ("{E} started running in {V}.", "The first bus on {E} ran in "
                                "{V}."), (1920, 2023), pp="started")),
      fillers=("{R} runs every {#10-30} minutes.", "{R} does not run on Christmas Day.",
               "{R} was extended in {#y}.", "Night buses follow {R} at weekends.")),
    D("painting", "painting", ("The {COL} {ANI}", "Portrait of {FIRST} {SUR}",
                               "{TOWN} at Dusk", "The {TREE} Grove"), category="thing", attrs=(
          A("painter", "person", ("{E} was painted by {V}.", "{V} painted {E}."),
            noun="painter", pp="painted", past="painted"),
          A("framer", "person", ("{E} was framed by {V}.", "The frame of {E} was made by "
                                 "{V}."), noun="framer"),
          A("year", "year", ("{E} was finished in {V}.", "{E} dates from {V}."),
            (1600, 2020), pp="finished"),
          A("height", "quantity", ("{E} is {V} tall.", "The canvas of {E} stands {V} "
                                   "high."), (20, 400, 0, ("cm",)), noun="height", adj="tall"),
          A("owner", "phrase", ("{E} belongs to {V}.", "The owner of {E} is {V}."),
            GALLERIES, noun="owner"),
          A("palette", "phrase", ("{E} is painted in {V}.", "The palette of {E} is {V}."),
            PALETTES, noun="palette")),
      fillers=("{R} was cleaned in {#y}.", "{R} hangs in a quiet room.", "Copies of {R} "
               "sell as postcards.", "{R} was lent abroad {#2-9} times.")),
)
