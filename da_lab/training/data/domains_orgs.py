"""Training domains: organisations (bands, schools, museums, libraries, restaurants,
universities, theatres, breweries, farms). See nl_domains for what the fields mean."""

from da_lab.training.data.nl_domains import Attr as A
from da_lab.training.data.nl_domains import Domain as D

GENRES = ("folk rock", "jazz fusion", "synth pop", "bluegrass", "post-punk", "soul",
          "heavy metal", "indie pop", "reggae", "dream pop", "ska", "country", "trip hop",
          "garage rock", "ambient techno", "gospel", "power pop", "afrobeat")
LABELS = ("Northern Lights Records", "Blue Pier Music", "Hollow Oak Sound", "Tin Lantern",
          "Marble Arch Records", "Quiet Harbour", "Red Kite Music", "Seventh Wave Records",
          "Lamplight Audio", "Paper Moon Records", "Iron Gate Music", "Brightwater Records",
          "Foxglove Sound", "Harbour Lights Music", "Velvet Sky Records")
MOTTOS = ("Learning for life", "Knowledge and kindness", "Always onward", "Truth and light",
          "Strength through unity", "Seek and serve", "Grow together", "Courage and care",
          "Ever curious", "Wisdom in work", "Light the way", "Faith and learning",
          "Steady and true", "Reach higher", "Hand and heart")
DISHES = ("slow-roasted lamb shoulder", "wild mushroom risotto", "smoked trout pâté",
          "beetroot and goat cheese tart", "crab linguine", "braised beef cheeks",
          "pumpkin gnocchi", "charred leek soup", "duck confit", "sea bass with fennel",
          "lemon sole", "venison stew", "saffron paella", "pork belly with apples",
          "spiced lentil dal", "chestnut ravioli")
CUISINES = ("Basque", "Sicilian", "Korean", "Lebanese", "Peruvian", "Georgian", "Vietnamese",
            "Ethiopian", "Provencal", "Keralan", "Nordic", "Catalan", "Persian", "Mexican",
            "Japanese", "Portuguese")
BEERS = ("Harvest Amber", "Old Lantern Stout", "Copper Kettle Ale", "Morning Mist Pale",
         "Black Heron Porter", "Golden Sheaf Lager", "Tidewater IPA", "Red Fox Bitter",
         "Winter Ember", "Hop Meadow", "Stone Bridge Mild", "Summer Lark", "Night Owl Dark",
         "Orchard Gold", "Iron Horse Ale")
CROPS = ("barley", "potatoes", "sugar beet", "rapeseed", "apples", "strawberries", "wheat",
         "oats", "lavender", "hops", "cherries", "asparagus", "sunflowers", "pears", "maize",
         "blackcurrants")
STYLES = ("Art Deco", "Gothic Revival", "brutalist", "Georgian", "Victorian", "Art Nouveau",
          "neoclassical", "modernist", "Tudor Revival", "Baroque", "Edwardian", "Italianate",
          "Arts and Crafts", "Beaux-Arts", "Romanesque Revival")

YEAR_OLD, YEAR_NEW = (1750, 2015), (1950, 2022)

DOMAINS = (
    D("band", "band", ("The {COL} {ANI}s", "{TOWN} Rebels", "The {SUR} Brothers",
                       "{WORD} and the {ANI}s", "The {TREE} Collective"), category="org",
      attrs=(
          A("formed", "year", ("{E} formed in {V}.", "{E} got together in {V} after meeting at "
                               "college.", "Founded in {V}, {E} began playing small pubs."),
            (1962, 2020), pp="formed"),
          A("singer", "person", ("{E}'s lead singer is {V}.", "{V} sings lead vocals for {E}.",
                                 "{E} is fronted by {V}."), noun="lead singer"),
          A("hometown", "place", ("{E} comes from {V}.", "{E} started out in {V}.",
                                  "The members of {E} grew up in {V}."), loc="based"),
          A("albums", "count", ("{E} has released {V} albums.", "So far {E} has put out {V} "
                                "studio albums."), (2, 24), count="albums"),
          A("genre", "phrase", ("{E} plays {V}.", "The music of {E} is usually described as "
                                "{V}."), GENRES, noun="genre"),
          A("label", "phrase", ("{E} is signed to {V}.", "{E} records for {V}."), LABELS,
            noun="record label")),
      fillers=("{R} once played three encores in a single night.", "{R} rehearses in a "
               "converted garage.", "Tickets for {R}'s last tour sold out in {#2-40} minutes.",
               "{R} appeared on a late-night radio show in {#y}.", "Fans of {R} often travel "
               "far to see them live.")),
    D("school", "school", ("{TOWN} Primary School", "{TOWN} High School",
                           "St {FIRST}'s School", "{SUR} Academy", "{TOWN} Grammar School"),
      category="org", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "{E} opened its doors in {V}.",
                                "Since {V}, {E} has taught children from the area."),
            YEAR_OLD, pp="founded"),
          A("head", "person", ("The headteacher of {E} is {V}.", "{V} has led {E} as head "
                               "teacher for several years.", "{E} is run by headteacher {V}."),
            noun="headteacher"),
          A("pupils", "count", ("{E} has {V} pupils.", "Around {V} pupils attend {E}.",
                                "{E} teaches {V} children."), (80, 2200), count="pupils"),
          A("fees", "price", ("Fees at {E} are {V} per year.", "{E} charges {V} a year."),
            (900, 24000, 0), noun="yearly fee"),
          A("motto", "phrase", ("{E}'s motto is \"{V}\".", "Over the gate of {E} the motto "
                                "\"{V}\" is carved."), MOTTOS, noun="motto"),
          A("city", "place", ("{E} is in {V}.", "{E} stands on the edge of {V}."),
            loc="located")),
      fillers=("{R} has a small orchard behind the sports hall.", "The school choir of {R} "
               "sings at the town hall every December.", "{R} added a science wing in {#y}.",
               "Classes at {R} start at {#8-9} o'clock.", "{R} keeps bees on its roof.")),
    D("museum", "museum", ("{TOWN} Museum", "Museum of {TOWN}", "The {SUR} Collection",
                           "{TOWN} Museum of Art", "{COL} House Museum"), category="org",
      attrs=(
          A("opened", "year", ("{E} opened in {V}.", "{E} first welcomed visitors in {V}.",
                               "The doors of {E} opened to the public in {V}."),
            (1820, 2020), pp="opened"),
          A("director", "person", ("The director of {E} is {V}.", "{V} directs {E}.",
                                   "Since last spring, {E} has been run by {V}."),
            noun="director"),
          A("visitors", "count", ("{E} receives about {V} visitors a year.", "Each year "
                                  "{V} people visit {E}."), (4000, 900000), count="visitors"),
          A("objects", "count", ("{E} holds {V} objects.", "The collection of {E} counts "
                                 "{V} objects."), (300, 90000), count="objects"),
          A("ticket", "price", ("Admission to {E} costs {V}.", "A ticket for {E} is {V}.",
                                "Entry to {E} is {V} for adults."), (3, 30, 2),
            noun="admission price"),
          A("city", "place", ("{E} is in {V}.", "You will find {E} in the old town of {V}."),
            loc="located")),
      fillers=("{R} has a café on its top floor.", "A copy of a famous map hangs in {R}'s "
               "entrance hall.", "{R} is closed on Mondays.", "Some {#20-400} paintings at "
               "{R} are kept in storage.", "A new wing of {R} opened in {#y}.")),
    D("library", "library", ("{TOWN} Library", "{TOWN} Public Library", "The {SUR} Library",
                             "{TREE} Street Library"), category="org", attrs=(
          A("opened", "year", ("{E} opened in {V}.", "{E} has lent books since {V}."),
            YEAR_OLD, pp="opened"),
          A("librarian", "person", ("The head librarian of {E} is {V}.", "{V} is the head "
                                    "librarian at {E}.", "{E} is looked after by head "
                                    "librarian {V}."), noun="head librarian"),
          A("volumes", "count", ("{E} holds {V} books.", "There are {V} books on the shelves "
                                 "of {E}."), (5000, 800000), count="books"),
          A("fee", "price", ("Membership of {E} costs {V} a year.", "A year's card at {E} "
                             "is {V}."), (5, 60, 0), noun="membership fee"),
          A("style", "phrase", ("{E} is built in the {V} style.", "The building of {E} is "
                                "{V}."), STYLES, noun="architectural style")),
      fillers=("{R} runs a reading club every Thursday.", "{R} has {#4-40} computers for "
               "visitors.", "Children's story hour at {R} starts at {#2-5} pm.",
               "{R} was repainted in {#y}.")),
    D("restaurant", "restaurant", ("The {COL} {ANI}", "{SUR}'s Kitchen", "Café {WORD}",
                                   "The {TREE} Table", "{WORD} Bistro"), category="org",
      attrs=(
          A("chef", "person", ("The head chef at {E} is {V}.", "{V} cooks at {E} as head "
                               "chef.", "In the kitchen of {E}, {V} is in charge."),
            noun="head chef"),
          A("opened", "year", ("{E} opened in {V}.", "{E} has served guests since {V}."),
            YEAR_NEW, pp="opened"),
          A("seats", "count", ("{E} seats {V} guests.", "There are {V} seats in {E}."),
            (12, 260), count="seats"),
          A("dish", "phrase", ("{E} is best known for its {V}.", "The signature dish of {E} "
                               "is {V}."), DISHES, noun="signature dish"),
          A("menu", "price", ("The set menu at {E} costs {V}.", "{E} offers a set menu "
                              "for {V}."), (15, 140, 0), noun="set menu price"),
          A("cuisine", "phrase", ("{E} serves {V} food.", "The cooking at {E} is {V}."),
            CUISINES, noun="cuisine")),
      fillers=("{R} is closed on Sundays.", "Tables at {R} are booked weeks ahead.",
               "{R} grows its own herbs in a courtyard.", "A critic gave {R} {#2-5} stars in "
               "{#y}.", "{R} has a wine list of about {#40-300} bottles.")),
    D("university", "university", ("University of {TOWN}", "{TOWN} University",
                                   "{SUR} University", "{TOWN} Institute of Technology"),
      category="org", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "{E} received its charter in {V}."),
            (1400, 1990), pp="founded"),
          A("rector", "person", ("The rector of {E} is {V}.", "{V} serves as rector of {E}.",
                                 "{E} is headed by its rector, {V}."), noun="rector"),
          A("students", "count", ("{E} has {V} students.", "About {V} students are enrolled "
                                  "at {E}."), (1500, 60000), count="students"),
          A("tuition", "price", ("Tuition at {E} is {V} a year.", "{E} charges {V} in yearly "
                                 "tuition."), (500, 30000, 0), noun="tuition"),
          A("motto", "phrase", ("The motto of {E} is \"{V}\".", "{E} chose \"{V}\" as its "
                                "motto."), MOTTOS, noun="motto"),
          A("city", "place", ("{E} is in {V}.", "{E} sits in the heart of {V}."),
            loc="based")),
      fillers=("{R} has a botanical garden open to the public.", "The library of {R} stays "
               "open until midnight.", "{R} has {#3-20} faculties.",
               "A fire damaged part of {R} in {#y}.")),
    D("theatre", "theatre", ("{TOWN} Playhouse", "The {COL} Theatre", "{SUR} Theatre",
                             "{TOWN} Opera House"), category="org", attrs=(
          A("opened", "year", ("{E} opened in {V}.", "The first play at {E} was staged in "
                               "{V}."), YEAR_OLD, pp="opened"),
          A("director", "person", ("The artistic director of {E} is {V}.", "{V} leads {E} as "
                                   "artistic director."), noun="artistic director"),
          A("seats", "count", ("{E} has {V} seats.", "The auditorium of {E} holds {V} "
                               "people."), (90, 2800), count="seats"),
          A("architect", "person", ("{E} was designed by {V}.", "The architect of {E} was "
                                    "{V}."), noun="architect", pp="designed",
            past="designed"),
          A("ticket", "price", ("Tickets at {E} start at {V}.", "The cheapest seat at {E} "
                                "costs {V}."), (6, 90, 0), noun="ticket price")),
      fillers=("{R} stages a pantomime every winter.", "The bar of {R} opens an hour before "
               "each show.", "{R} was restored in {#y}.", "A ghost is said to haunt row "
               "{#2-30} of {R}.")),
    D("brewery", "brewery", ("{TOWN} Brewery", "{SUR} & Sons Brewery", "{COL} {ANI} Brewing",
                             "{WORD} Brewing Company"), category="org", attrs=(
          A("founded", "year", ("{E} was founded in {V}.", "{E} has brewed beer since {V}."),
            (1700, 2020), pp="founded"),
          A("brewer", "person", ("The head brewer at {E} is {V}.", "{V} is head brewer at "
                                 "{E}."), noun="head brewer"),
          A("beers", "count", ("{E} makes {V} different beers.", "{E} brews {V} beers."),
            (3, 40), count="beers"),
          A("output", "quantity", ("{E} brews {V} of beer a year.", "Each year {E} produces "
                                   "{V} of beer."), (20000, 9000000, 0, ("litres",)),
            noun="yearly output"),
          A("flagship", "phrase", ("The best-selling beer of {E} is {V}.", "{E} is known for "
                                   "{V}."), BEERS, noun="best-selling beer")),
      fillers=("{R} offers tours on Saturday afternoons.", "{R} uses water from its own "
               "well.", "A pint at {R}'s tap room is about {#p}.",
               "{R} won a regional prize in {#y}.")),
    D("farm", "farm", ("{TREE} Farm", "{SUR}'s Farm", "{TOWN} Farm", "{COL} Gate Farm",
                       "Lower {TREE} Farm"), category="org", attrs=(
          A("area", "quantity", ("{E} covers {V}.", "The land of {E} spans {V}."),
            (8, 900, 0, ("hectares", "acres")), noun="area"),
          A("owner", "person", ("{E} is owned by {V}.", "{V} runs {E}.", "The owner of {E} "
                                "is {V}."), noun="owner"),
          A("cows", "count", ("{E} keeps {V} cows.", "There are {V} cows at {E}."),
            (10, 900), count="cows"),
          A("crop", "phrase", ("The main crop of {E} is {V}.", "{E} mostly grows {V}."),
            CROPS, noun="main crop"),
          A("founded", "year", ("{E} has been farmed by the same family since {V}.",
                                "{E} was set up in {V}."), YEAR_OLD, pp="set up")),
      fillers=("{R} sells eggs at its gate.", "{R} has an old stone barn.", "A footpath "
               "crosses {R} from north to south.", "{R} took on {#2-9} seasonal workers "
               "last summer.")),
)
