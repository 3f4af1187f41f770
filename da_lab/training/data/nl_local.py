"""Questions that need no document (the reply writes `<local>`): arithmetic, general
knowledge, chit-chat and rewriting. Each is (question, reply, expected values); values are what
an answer must name (none for chit-chat). General knowledge and chit-chat are split like every
pool (every third item held out), so held-out prompts ask things training never asked.
GK_TRAINING adds facts training alone draws from: more facts to answer from the model's own
knowledge, so it learns that skill rather than twenty replies (issue 26: "Thursday comes after
Monday"). None shares an answer with a held-out GK item or a local question of
bench/data/handwritten-prompts.jsonl; a test checks it."""

from __future__ import annotations

from da_lab.training.data import nl_values as V
from da_lab.training.data import nl_words as W

GK = (
    ("What is the capital of France?", "The capital of France is Paris.", "Paris"),
    ("What is the capital of Italy?", "The capital of Italy is Rome.", "Rome"),
    ("What is the capital of Spain?", "The capital of Spain is Madrid.", "Madrid"),
    ("What is the capital of Germany?", "The capital of Germany is Berlin.", "Berlin"),
    ("What is the capital of Japan?", "The capital of Japan is Tokyo.", "Tokyo"),
    ("What is the capital of Portugal?", "The capital of Portugal is Lisbon.", "Lisbon"),
    ("What is the capital of Egypt?", "The capital of Egypt is Cairo.", "Cairo"),
    ("What is the capital of Norway?", "The capital of Norway is Oslo.", "Oslo"),
    ("What is the capital of Greece?", "The capital of Greece is Athens.", "Athens"),
    ("How many days are there in a week?", "There are 7 days in a week.", "7"),
    ("How many months are there in a year?", "There are 12 months in a year.", "12"),
    ("How many hours are there in a day?", "There are 24 hours in a day.", "24"),
    ("How many minutes are there in an hour?", "There are 60 minutes in an hour.", "60"),
    ("How many legs does a spider have?", "A spider has 8 legs.", "8"),
    ("How many sides does a triangle have?", "A triangle has 3 sides.", "3"),
    ("How many sides does a hexagon have?", "A hexagon has 6 sides.", "6"),
    ("What colour is grass?", "Grass is green.", "green"),
    ("What colour is the sky on a clear day?", "The sky is blue on a clear day.", "blue"),
    ("What colour are ripe bananas?", "Ripe bananas are yellow.", "yellow"),
    ("At what temperature does water freeze in Celsius?", "Water freezes at 0 degrees "
     "Celsius.", "0"),
    ("At what temperature does water boil in Celsius?", "Water boils at 100 degrees Celsius.",
     "100"),
    ("Which planet is closest to the Sun?", "Mercury is the planet closest to the Sun.",
     "Mercury"),
    ("What is the largest ocean on Earth?", "The Pacific is the largest ocean on Earth.",
     "Pacific"),
    ("Which day comes after Monday?", "Tuesday comes after Monday.", "Tuesday"),
    ("Which day comes before Friday?", "Thursday comes before Friday.", "Thursday"),
    ("Which month comes after March?", "April comes after March.", "April"),
    ("What is the opposite of hot?", "The opposite of hot is cold.", "cold"),
    ("What is the opposite of tall?", "The opposite of tall is short.", "short"),
    ("What is the plural of mouse?", "The plural of mouse is mice.", "mice"),
    ("What is the plural of child?", "The plural of child is children.", "children"),
)

GK_TRAINING = (
    ("What is the capital of Poland?", "The capital of Poland is Warsaw.", "Warsaw"),
    ("What is the capital of Sweden?", "The capital of Sweden is Stockholm.", "Stockholm"),
    ("What is the capital of Ireland?", "The capital of Ireland is Dublin.", "Dublin"),
    ("What is the capital of Canada?", "The capital of Canada is Ottawa.", "Ottawa"),
    ("What is the capital of Kenya?", "The capital of Kenya is Nairobi.", "Nairobi"),
    ("What is the capital of Russia?", "The capital of Russia is Moscow.", "Moscow"),
    ("What is the capital of China?", "The capital of China is Beijing.", "Beijing"),
    ("What is the capital of Peru?", "The capital of Peru is Lima.", "Lima"),
    ("What is the capital of Finland?", "The capital of Finland is Helsinki.", "Helsinki"),
    ("What is the capital of Denmark?", "The capital of Denmark is Copenhagen.", "Copenhagen"),
    ("What is the capital of Hungary?", "The capital of Hungary is Budapest.", "Budapest"),
    ("How many seconds are there in a minute?", "There are 60 seconds in a minute.", "60"),
    ("How many weeks are there in a year?", "There are 52 weeks in a year.", "52"),
    ("How many days are there in a leap year?", "A leap year has 366 days.", "366"),
    ("How many legs does a dog have?", "A dog has 4 legs.", "4"),
    ("How many legs does a bird have?", "A bird has 2 legs.", "2"),
    ("How many wheels does a bicycle have?", "A bicycle has 2 wheels.", "2"),
    ("How many sides does a square have?", "A square has 4 sides.", "4"),
    ("How many sides does a pentagon have?", "A pentagon has 5 sides.", "5"),
    ("How many sides does an octagon have?", "An octagon has 8 sides.", "8"),
    ("How many players does a football team have on the field?",
     "A football team has 11 players on the field.", "11"),
    ("How many things are in a dozen?", "A dozen is 12 things.", "12"),
    ("How many grams are there in a kilogram?", "There are 1000 grams in a kilogram.", "1000"),
    ("What colour is snow?", "Snow is white.", "white"),
    ("What colour is coal?", "Coal is black.", "black"),
    ("What colour is a ripe tomato?", "A ripe tomato is red.", "red"),
    ("What is the first month of the year?", "January is the first month of the year.", "January"),
    ("What is the last month of the year?", "December is the last month of the year.", "December"),
    ("Which month comes after June?", "July comes after June.", "July"),
    ("Which month comes before December?", "November comes before December.", "November"),
    ("What is the opposite of up?", "The opposite of up is down.", "down"),
    ("What is the opposite of fast?", "The opposite of fast is slow.", "slow"),
    ("What is the opposite of early?", "The opposite of early is late.", "late"),
    ("What is the opposite of wet?", "The opposite of wet is dry.", "dry"),
    ("What is the plural of foot?", "The plural of foot is feet.", "feet"),
    ("What is the plural of tooth?", "The plural of tooth is teeth.", "teeth"),
    ("What is the plural of man?", "The plural of man is men.", "men"),
    ("What is the plural of goose?", "The plural of goose is geese.", "geese"),
    ("What is the plural of person?", "The plural of person is people.", "people"),
    ("Which is the largest planet?", "Jupiter is the largest planet.", "Jupiter"),
    ("Which planet do we live on?", "We live on the planet Earth.", "Earth"),
    ("What do bees make?", "Bees make honey.", "honey"),
    ("Which gas do we need to breathe?", "We need oxygen to breathe.", "oxygen"),
    ("Which animal is called the king of the jungle?", "The lion is called the king of the jungle.",
     "lion"),
    ("What is frozen water called?", "Frozen water is called ice.", "ice"),
)

CHAT = (
    ("Hello! How are you today?", "I am fine, thank you. How can I help you?"),
    ("Thank you for your help.", "You are welcome."),
    ("Good morning!", "Good morning! How can I help you today?"),
    ("Can you help me with something?", "Of course. What do you need?"),
    ("Who are you?", "I am an assistant that answers questions about your documents."),
    ("Thanks, that is all for now.", "You are welcome. Have a nice day."),
    ("Hi there.", "Hello! What would you like to know?"),
    ("Are you still there?", "Yes, I am here. How can I help?"),
    ("Tell me a fun fact.", "Honey never spoils if it is kept sealed."),
    ("Say something nice.", "You are doing a great job."),
    ("What can you do?", "I can answer questions about the documents you give me."),
    ("Good night!", "Good night! Sleep well."),
)

FRUITS = ("apple", "banana", "cherry", "fig", "grape", "kiwi", "lemon", "mango", "olive",
          "peach", "pear", "plum", "quince", "melon", "date", "lime")
NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve "
                "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty").split()


def _arith(rng) -> tuple[str, str, list[str]]:
    op = int(rng.integers(4))
    if op == 0:
        x, y = (int(v) for v in rng.integers(2, 100, size=2))
        r, word = x + y, "plus"
    elif op == 1:
        x, y = sorted((int(v) for v in rng.integers(2, 100, size=2)), reverse=True)
        r, word = x - y, "minus"
    elif op == 2:
        x, y = (int(v) for v in rng.integers(2, 13, size=2))
        r, word = x * y, "times"
    else:
        y, r = (int(v) for v in rng.integers(2, 13, size=2))
        x, word = y * r, "divided by"
    q = V.pick(rng, (f"What is {x} {word} {y}?", f"How much is {x} {word} {y}?",
                     f"Compute {x} {word} {y}.", f"Quick sum: {x} {word} {y}?"))
    return q, f"{x} {word} {y} is {r}.", [str(r)]


def _rewrite(rng, heldout: bool) -> tuple[str, str, list[str]]:
    p = V.pools(heldout)
    k = int(rng.integers(4))
    if k == 0:
        v = f"{V.pick(rng, p['FIRST'])} {V.pick(rng, p['SUR'])}"
        q = V.pick(rng, (f"Please repeat this name exactly: {v}.", f"Say the name {v} back "
                         "to me.", f"Repeat after me: {v}."))
        return q, f"The name is {v}.", [v]
    words = [str(w) for w in rng.choice(W.split(FRUITS, heldout), size=3, replace=False)]
    if k == 1:
        out = sorted(words)
        return (f"Put these words in alphabetical order: {', '.join(words)}.",
                f"In alphabetical order: {', '.join(out)}.", out)
    if k == 2:
        out = words[::-1]
        return (f"Reverse this list: {', '.join(words)}.", f"Reversed: {', '.join(out)}.",
                out)
    n = int(rng.integers(len(NUMBER_WORDS)))
    return (f"Write the number {NUMBER_WORDS[n]} in digits.",
            f"{NUMBER_WORDS[n].capitalize()} in digits is {n}.", [str(n)])


def local_question(rng, heldout: bool) -> tuple[str, str, list[str]]:
    """One question that needs no document, with its reply and expected values."""
    u = rng.random()
    if u < 0.35:
        return _arith(rng)
    if u < 0.6:
        q, r, v = V.pick(rng, W.split(GK, heldout) + (() if heldout else GK_TRAINING))
        return q, r, [v]
    if u < 0.8:
        q, r = V.pick(rng, W.split(CHAT, heldout))
        return q, r, []
    return _rewrite(rng, heldout)
