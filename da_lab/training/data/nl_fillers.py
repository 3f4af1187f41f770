"""Sentences that carry no asked fact: generic fillers by category (with distracting numbers),
scene-setting sentences that name no entity, mentions of another entity (a name that is not
this document's subject), and titles. {R} is the entity (any reference), {O} another entity's
name, {#a-b} / {#y} / {#p} numbers (nl_values.fill_numbers)."""

GENERIC = {
    "org": (
        "{R} is open from {#8-10} in the morning.", "{R} has a website that lists its news.",
        "{R} took part in a charity event in {#y}.", "{R} has about {#3-60} volunteers.",
        "A local newspaper wrote about {R} in {#y}.", "{R} sends out a newsletter every "
        "month.", "The building of {R} has {#2-9} floors.", "{R} marks its anniversary each "
        "spring.", "Parking near {R} costs {#2-15} euros a day.", "{R} changed its logo in {#y}.",
        "{R} is a short walk from the nearest bus stop.", "Around {#10-90} people attended "
        "an open day at {R}."),
    "place": (
        "{R} is a popular spot for walkers.", "The nearest railway station to {R} is {#2-40} "
        "km away.", "{R} appears on maps from {#y}.", "Visitors to {R} often arrive by "
        "bus.", "A storm damaged {R} in {#y}.", "{R} is quiet in winter.", "Guided walks "
        "around {R} start at {#9-11} o'clock.", "Photographers like {R} at sunset.",
        "{R} was surveyed again in {#y}.", "A small car park serves {R}.", "{R} is about "
        "{#5-90} km from the coast.", "Local legends are told about {R}."),
    "thing": (
        "{R} has a loyal following.", "{R} was described in a magazine in {#y}.",
        "{R} has been copied many times.", "A photograph of {R} won a prize in {#y}.",
        "{R} is often mentioned in guidebooks.", "Collectors still look for early "
        "pictures of {R}.", "{R} featured in an exhibition of {#20-300} items.",
        "{R} has its own page in many reference books.", "People still talk about {R} "
        "today.", "{R} was the subject of a short documentary."),
    "living": (
        "{R} is often photographed.", "{R} was the subject of a study in {#y}.",
        "{R} appears in several old books.", "{R} is well known in the region.",
        "A short film about {R} was shown in {#y}.", "{R} is mentioned in a local "
        "guide."),
}

CONTEXT = (
    "Records from the early years are incomplete.", "The figures below come from the most "
    "recent annual report.", "Opinions on this differ.", "Some of the older details are "
    "disputed.", "What follows is a short summary.", "The notes below were collected by "
    "volunteers.", "This entry was last updated a few months ago.", "Sources for this "
    "section are listed at the end.", "The region has changed a great deal over the past "
    "century.", "Much of the information here comes from local archives.",
    "Not every detail could be checked.", "A longer history is available on request.",
)

OTHER = (
    "{R} is not to be confused with {O}.", "{R} is often compared with {O}.",
    "Visitors sometimes mix up {R} and {O}.", "Unlike {O}, {R} rarely makes the news.",
    "{O} is sometimes mentioned in the same breath as {R}.",
)

TITLES = ("{N}", "{N}: an overview", "About {N}", "{N} ({T})", "{N} at a glance",
          "Profile: {N}", "{N} - key facts", "Notes on {N}")
