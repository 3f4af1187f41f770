"""Held-out domains: never drawn in training (neither asked about nor as distractors), only
to evaluate. Five are the domains of the issue's own held-out set (products, moons, sports
clubs, recipes, companies); three more (satellites, hospitals, festivals). See nl_domains."""

from da_lab.training.data.nl_domains import Attr as A
from da_lab.training.data.nl_domains import Domain as D

COLOURS = ("matte black", "forest green", "sand beige", "slate grey", "ocean blue",
           "cherry red", "pearl white", "mustard yellow", "dusty pink", "copper brown",
           "midnight navy", "olive", "lavender", "charcoal", "teal")
MATERIALS = ("recycled aluminium", "bamboo", "walnut wood", "stainless steel", "cork",
             "carbon fibre", "oak veneer", "tempered glass", "ceramic", "brushed brass",
             "polished concrete", "linen", "waxed canvas", "titanium", "beech plywood")
SURFACES = ("water ice", "dark dust", "sulphur plains", "frozen nitrogen", "craters",
            "cracked ice ridges", "red rock", "grey regolith", "methane lakes", "smooth ice",
            "ash fields", "salt flats", "black sand", "icy canyons", "orange haze")
GROUNDS = ("Ashfield Park", "the Riverside Ground", "Kingsmoor Stadium", "Elm Lane",
           "Harbour Road", "the Millfield", "Castle Meadow", "Brookside Arena", "the Old Quay",
           "Victoria Park", "Pinewood Stadium", "the Greenway Ground", "North Street",
           "Holloway Park", "Station Road")
KITS = ("red and white stripes", "sky blue shirts", "black and amber hoops",
        "green shirts with white sleeves", "all white", "claret and blue", "navy and gold",
        "orange shirts", "purple and black", "yellow with green trim", "maroon shirts",
        "blue and white halves", "grey and pink", "tangerine and black", "emerald green")
INGREDIENTS = ("rhubarb", "smoked paprika", "brown butter", "cardamom", "fresh dill",
               "toasted hazelnuts", "preserved lemon", "tahini", "black treacle", "sumac",
               "miso", "elderflower", "star anise", "juniper berries", "wild garlic")
SECTORS = ("renewable energy", "logistics", "textiles", "medical devices", "shipping",
           "food processing", "printing", "precision optics", "furniture", "water treatment",
           "insurance", "robotics", "packaging", "ceramics", "telecoms")
AGENCIES = ("the Northern Space Agency", "Orbital Sciences Ltd", "the Baltic Research "
            "Council", "Skyward Instruments", "the European Weather Office", "Lumen Orbital",
            "the Alpine Geodesy Institute", "Kestrel Aerospace", "the Polar Data Centre",
            "Meridian Space", "the Coastal Survey", "Vanta Systems", "the Solar Physics "
            "Group", "Halo Launch", "the Ocean Watch Trust")
SPECIALTIES = ("cardiology", "orthopaedics", "children's medicine", "burns care",
               "cancer care", "eye surgery", "neurology", "maternity", "kidney care",
               "spinal injuries", "dermatology", "stroke care", "geriatrics",
               "plastic surgery", "infectious diseases")
MONTHS_PHRASE = ("early June", "late August", "mid September", "the first week of May",
                 "late July", "early October", "mid March", "the last week of April",
                 "early December", "mid January", "late February", "early July",
                 "mid November", "late May", "the first week of August")

DOMAINS = (
    D("product", "product", ("{WORD} {NUM}", "{WORD} Pro", "{COL} {ANI} Kettle",
                             "{WORD} Lamp", "The {WORD} Chair"), category="thing", attrs=(
          A("price", "price", ("{E} costs {V}.", "{E} sells for {V}.", "The retail price of "
                               "{E} is {V}."), (9, 2400, 2), noun="price", cost=True),
          A("weight", "quantity", ("{E} weighs {V}.", "At {V}, {E} is easy to carry."),
            (0.2, 40, 1, ("kg", "kilograms")), noun="weight"),
          A("released", "date", ("{E} went on sale on {V}.", "{E} was released on {V}."),
            (2005, 2024), pp="released"),
          A("designer", "person", ("{E} was designed by {V}.", "The designer of {E} is {V}."),
            noun="designer", pp="designed", past="designed"),
          A("colour", "phrase", ("{E} comes in {V}.", "The standard colour of {E} is {V}."),
            COLOURS, noun="colour"),
          A("warranty", "quantity", ("{E} comes with a {V} warranty.", "The warranty on {E} "
                                     "lasts {V}."), (1, 10, 0, ("years",)), noun="warranty")),
      fillers=("{R} ships in a plain cardboard box.", "Reviews of {R} praise its build "
               "quality.", "About {#2000-90000} units of {R} were sold in {#y}.",
               "{R} has a removable cable of {#1-3} metres.")),
    D("moon", "moon", ("{WORD}", "{GREEK} {WORD}", "{WORD} {NUM}", "{WORD} Minor"),
      category="thing", attrs=(
          A("diameter", "quantity", ("{E} is {V} across.", "The diameter of {E} is {V}.",
                                     "{E} measures {V} from pole to pole."),
            (8, 5300, 0, ("km", "kilometres")), noun="diameter"),
          A("discovered", "year", ("{E} was discovered in {V}.", "Astronomers first saw {E} "
                                   "in {V}."), (1610, 2022), pp="discovered"),
          A("discoverer", "person", ("{E} was discovered by {V}.", "{V} discovered {E}."),
            noun="discoverer", past="discovered"),
          A("orbit", "quantity", ("{E} circles its planet every {V}.", "One orbit of {E} "
                                  "takes {V}."), (1, 400, 1, ("days",)), noun="orbital period"),
          A("surface", "phrase", ("The surface of {E} is covered in {V}.", "{E} is covered "
                                  "with {V}."), SURFACES, noun="surface"),
          A("craters", "count", ("{E} has {V} named craters.", "Maps show {V} named craters "
                                 "on {E}."), (0, 900), count="named craters")),
      fillers=("{R} always shows the same face to its planet.", "{R} is too faint to see "
               "without a telescope.", "A probe flew past {R} in {#y}.", "{R} is about "
               "{#2-90} times fainter than its neighbour.")),
    D("club", "club", ("{TOWN} Albion", "{TOWN} Rovers", "{TOWN} United", "FC {TOWN}",
                       "{TOWN} Athletic"), category="org", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "{E} was formed in {V} by local "
                                "factory workers."), (1860, 2010), pp="founded"),
          A("coach", "person", ("{E} is coached by {V}.", "The head coach of {E} is {V}.",
                                "{V} took over as head coach of {E} last summer."),
            noun="head coach", ask=(("Who coaches {E}?", "{V} coaches {E}."),)),
          A("captain", "person", ("The captain of {E} is {V}.", "{V} wears the captain's "
                                  "armband at {E}."), noun="captain"),
          A("ground", "phrase", ("{E} plays its home games at {V}.", "The home ground of {E} "
                                 "is {V}."), GROUNDS, noun="home ground"),
          A("capacity", "count", ("The ground of {E} holds {V} fans.", "Up to {V} spectators "
                                  "can watch {E} at home."), (800, 60000), noun="capacity"),
          A("kit", "phrase", ("{E} plays in {V}.", "The home kit of {E} is {V}."), KITS,
            noun="home kit")),
      fillers=("{R} has a youth academy.", "Supporters of {R} sing before every match.",
               "{R} won the regional cup in {#y}.", "{R} finished {#2-20}th last season.")),
    D("recipe", "recipe", ("{TOWN} {TREE} Cake", "{COL} Bean Stew", "{SUR}'s Pie",
                           "{WORD} Bread", "{TREE}wood Tart"), category="thing", attrs=(
          A("serves", "count", ("{E} serves {V}.", "This recipe for {E} makes enough for {V} "
                                "people."), (1, 16), count="people", ask=(
                                    ("How many people does {E} serve?", "{E} serves {V}."),)),
          A("time", "quantity", ("{E} takes {V} to cook.", "Cooking {E} takes {V}."),
            (10, 240, 0, ("minutes",)), noun="cooking time"),
          A("temperature", "quantity", ("Bake {N} at {V}.", "{E} goes into the oven at {V}."),
            (140, 240, 0, ("°C", "degrees")), noun="oven temperature"),
          A("ingredient", "phrase", ("The key ingredient of {E} is {V}.", "{E} gets its "
                                     "flavour from {V}."), INGREDIENTS, noun="key ingredient"),
          A("creator", "person", ("{E} was created by {V}.", "The recipe for {E} comes from "
                                  "{V}."), noun="creator", pp="created"),
          A("calories", "count", ("A portion of {E} has {V} calories.", "Each serving of {E} "
                                  "contains {V} calories."), (90, 1400), count="calories")),
      fillers=("{R} keeps for three days in the fridge.", "Leftovers of {R} freeze well.",
               "{R} first appeared in a magazine in {#y}.", "Let {R} rest for {#5-30} "
               "minutes before serving.")),
    D("company", "company", ("{SUR} Textiles", "{TOWN} Logistics", "{WORD} Systems",
                             "{COL} {ANI} Ltd", "{SUR} & Partners"), category="org", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "{E} started trading in {V}."),
            (1850, 2020), pp="founded"),
          A("ceo", "person", ("The chief executive of {E} is {V}.", "{E} is led by CEO {V}.",
                              "{V} runs {E} as chief executive."), noun="chief executive"),
          A("employees", "count", ("{E} employs {V} people.", "{E} has {V} employees.",
                                   "Some {V} staff work for {E}."), (8, 90000),
            count="employees"),
          A("revenue", "price", ("{E} reported revenue of {V} last year.", "Last year {E} "
                                 "turned over {V}."), (200000, 900000000, 0), noun="revenue"),
          A("hq", "place", ("{E} has its headquarters in {V}.", "{E} is based in {V}."),
            loc="headquartered"),
          A("sector", "phrase", ("{E} works in {V}.", "{E} is a {V} business."), SECTORS,
            noun="sector")),
      fillers=("{R} pays its staff a bonus every December.", "{R} moved into new offices "
               "in {#y}.", "{R} has {#2-40} branches abroad.", "{R} sponsors a local "
               "youth choir.")),
    D("satellite", "satellite", ("{WORD}-{NUM}", "{GREEK}sat", "{WORD} Explorer",
                                 "{ANI} {NUM}"), category="thing", attrs=(
          A("launched", "date", ("{E} was launched on {V}.", "{E} lifted off on {V}."),
            (1970, 2024), pp="launched"),
          A("altitude", "quantity", ("{E} orbits at {V}.", "{E} circles the Earth at a height "
                                     "of {V}."), (300, 36000, 0, ("km", "kilometres")),
            noun="orbital altitude"),
          A("mass", "quantity", ("{E} weighs {V}.", "At launch {E} had a mass of {V}."),
            (4, 9000, 0, ("kg", "kilograms")), noun="mass"),
          A("operator", "phrase", ("{E} is operated by {V}.", "{V} runs {E}."), AGENCIES,
            noun="operator"),
          A("pi", "person", ("The principal investigator of {E} is {V}.", "{V} leads the "
                             "science team of {E}."), noun="principal investigator"),
          A("site", "place", ("{E} was launched from a pad near {V}.", "The launch site of "
                              "{E} was close to {V}."), noun="launch site")),
      fillers=("{R} sends data down twice a day.", "{R} has two solar panels.",
               "{R} was expected to last {#2-15} years.", "A software update reached {R} "
               "in {#y}.")),
    D("hospital", "hospital", ("{TOWN} General Hospital", "St {FIRST}'s Hospital",
                               "{TOWN} Royal Infirmary", "{SUR} Memorial Hospital"),
      category="org", attrs=(
          A("opened", "year", ("{E} opened in {V}.", "{E} admitted its first patients in "
                               "{V}."), (1850, 2020), pp="opened"),
          A("chief", "person", ("The chief executive of {E} is {V}.", "{V} leads {E} as "
                                "chief executive."), noun="chief executive"),
          A("beds", "count", ("{E} has {V} beds.", "There are {V} beds at {E}."), (40, 2500),
            count="beds"),
          A("staff", "count", ("{E} employs {V} staff.", "Some {V} people work at {E}."),
            (200, 12000), count="staff"),
          A("specialty", "phrase", ("{E} is known for {V}.", "{E} specialises in {V}."),
            SPECIALTIES, noun="specialty"),
          A("city", "place", ("{E} is in {V}.", "{E} serves the city of {V}."),
            loc="located")),
      fillers=("{R} has a helipad on its roof.", "Visiting hours at {R} end at {#7-9} pm.",
               "{R} was extended in {#y}.", "Volunteers run the shop in {R}'s entrance.")),
    D("festival", "festival", ("{TOWN} Folk Festival", "{TOWN} Jazz Week",
                               "{COL} Lantern Festival", "{WORD} Fest"), category="org",
      attrs=(
          A("first", "year", ("{E} was first held in {V}.", "{E} began in {V}."),
            (1950, 2022), pp="first held"),
          A("director", "person", ("The festival director of {E} is {V}.", "{V} directs "
                                   "{E}."), noun="festival director"),
          A("visitors", "count", ("{E} draws {V} visitors.", "Some {V} people came to {E} last "
                                  "year."), (500, 300000), count="visitors"),
          A("ticket", "price", ("A weekend ticket for {E} costs {V}.", "Tickets to {E} are "
                                "{V}."), (10, 320, 0), noun="ticket price"),
          A("town", "place", ("{E} takes place in {V}.", "{E} is held every year in {V}."),
            noun="host town"),
          A("month", "phrase", ("{E} takes place in {V}.", "{E} is held in {V} each year."),
            MONTHS_PHRASE, noun="usual date")),
      fillers=("{R} runs on the work of volunteers.", "{R} has a children's stage.",
               "Rain cancelled {R} in {#y}.", "{R} hosts about {#20-300} acts.")),
)
