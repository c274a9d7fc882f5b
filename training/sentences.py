#!/usr/bin/env python3
"""Sentence generator for the qasr demo model (English and German).

Sentences are built from templates and word lists, with numbers, dates, times, money amounts and percentages
written in digits (one canonical written form per spoken form, so the mapping speech -> text is learnable), and
with punctuation and capitalisation. Everything is driven by one `random.Random(seed)`, so the same seed gives the
same sentences on every machine (standard library only).

    python3 training/sentences.py --lang en --n 5 --seed 1
"""
import argparse
import random
import re
import unicodedata

# ----------------------------------------------------------------------------------------------------------------
# English
# ----------------------------------------------------------------------------------------------------------------
EN_NAMES = """Anna Peter Maria James Oliver Sophie Thomas Emma Daniel Laura Michael Sarah David Julia Robert Lucy
Henry Grace William Alice George Clara Jack Emily Samuel Hannah Martin Olivia Paul Rachel Simon Helen Victor Nora
Lucas Chloe Adam Zoe Felix Ruth Oscar Irene Hugo Megan Leo Diana Frank Karen Ethan Fiona""".split()
EN_CITIES = """London Paris Berlin Madrid Rome Vienna Boston Chicago Toronto Sydney Tokyo Dublin Oslo Prague Lisbon
Munich Hamburg Zurich Geneva Amsterdam Brussels Warsaw Athens Cairo Denver Seattle Austin Glasgow Leeds Bristol
Oxford Cambridge Edinburgh Manchester Liverpool Stockholm Helsinki Budapest Milan Naples""".split()
EN_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
EN_MONTHS = "January February March April May June July August September October November December".split()
EN_NOUNS = """book car house garden window letter bottle chair table phone camera bicycle ticket jacket bag key map
lamp picture computer printer kitchen bridge river station office library museum hospital school bakery market
street village island mountain forest lake beach harbour airport hotel restaurant theatre cinema church castle
report contract budget invoice package parcel recipe song film story question answer problem idea plan meeting
message email photo dog cat horse bird apple orange cake bread coffee tea cheese soup sandwich umbrella""".split()
EN_PLURALS = {"bus": "buses", "box": "boxes", "church": "churches", "sandwich": "sandwiches", "story": "stories",
              "library": "libraries", "bakery": "bakeries", "city": "cities", "village": "villages"}
EN_ADJS = """red blue green yellow black white old new small large heavy light cheap expensive quiet noisy clean dirty
warm cold beautiful strange modern ancient empty full broken famous simple difficult busy lovely dark bright
wooden narrow wide long short friendly""".split()
EN_VERBS_PAST = """found bought sold painted cleaned opened closed repaired visited carried borrowed lost ordered
delivered moved checked packed washed described photographed returned forgot remembered shared needed""".split()
EN_VERBS_BASE = """find buy sell paint clean open close repair visit carry borrow order deliver move check pack wash
describe return share need""".split()
EN_JOBS = """teacher doctor nurse engineer driver baker farmer pilot lawyer waiter writer painter student manager
scientist musician chef dentist gardener librarian""".split()
EN_PLACES = """the station|the office|the library|the museum|the hospital|the school|the bakery|the market|the airport
|the hotel|the harbour|the beach|the park|the bank|the post office|the city centre|the garden|the kitchen""".replace(
    "\n", "").split("|")
EN_UNITS = ["kilometres", "metres", "kilograms", "litres", "minutes", "hours", "days", "weeks", "years", "people",
            "students", "books", "tickets", "apples", "cars", "pages", "degrees", "miles", "points", "boxes"]
EN_WEATHER = ["sunny", "rainy", "cloudy", "windy", "cold", "warm", "foggy", "hot", "dry", "wet"]
EN_TIME_WORDS = ["this morning", "this afternoon", "this evening", "yesterday", "today", "tomorrow", "last week",
                 "next week", "last month", "next month", "last year", "next year", "tonight"]


def _ordinal_en(n):
    if 10 <= n % 100 <= 20:
        suf = "th"
    else:
        suf = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suf}"


def _plural_en(w):
    if w in EN_PLURALS:
        return EN_PLURALS[w]
    if w.endswith(("s", "x", "ch", "sh")):
        return w + "es"
    if w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    return w + "s"


def _an(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


class EnglishGen:
    def __init__(self, rng):
        self.r = rng

    # --- slot fillers -------------------------------------------------------------------------------------------
    def name(self): return self.r.choice(EN_NAMES)
    def city(self): return self.r.choice(EN_CITIES)
    def day(self): return self.r.choice(EN_DAYS)
    def month(self): return self.r.choice(EN_MONTHS)
    def noun(self): return self.r.choice(EN_NOUNS)
    def adj(self): return self.r.choice(EN_ADJS)
    def job(self): return self.r.choice(EN_JOBS)
    def place(self): return self.r.choice(EN_PLACES)
    def when(self): return self.r.choice(EN_TIME_WORDS)

    def np(self):
        r = self.r.random()
        if r < 0.35:
            return "the " + self.noun()
        if r < 0.6:
            return "the " + self.adj() + " " + self.noun()
        if r < 0.8:
            return _an(self.adj()) + " " + self.noun()
        return self.r.choice(["my", "your", "his", "her", "our", "their"]) + " " + self.noun()

    def count(self):
        r = self.r.random()
        if r < 0.4:
            return self.r.randint(2, 20)
        if r < 0.7:
            return self.r.randint(21, 99)
        if r < 0.9:
            return self.r.randint(100, 999)
        return self.r.randint(1000, 9999)

    def year(self): return self.r.randint(1950, 2035)

    def date(self):
        d = self.r.randint(1, 28)
        m = self.month()
        k = self.r.random()
        if k < 0.4:
            return f"{d} {m} {self.year()}"
        if k < 0.7:
            return f"{m} {d}, {self.year()}"
        if k < 0.85:
            return f"{d} {m}"
        return f"the {_ordinal_en(d)} of {m}"

    def time(self):
        h = self.r.randint(1, 23)
        mnt = self.r.choice([5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 12, 18, 27, 33, 48])
        return f"{h}:{mnt:02d}"

    def money(self):
        k = self.r.random()
        if k < 0.45:
            return f"${self.r.randint(2, 999)}"
        if k < 0.75:
            return f"${self.r.randint(1, 99)}.{self.r.randint(10, 99)}"
        return f"{self.r.randint(2, 500)} euros"

    def pct(self): return f"{self.r.randint(2, 95)}%"

    def decimal(self): return f"{self.r.randint(0, 20)}.{self.r.randint(1, 9)}"

    # --- templates ----------------------------------------------------------------------------------------------
    def sentence(self):
        r = self.r
        n, n2, c, c2 = self.name(), self.name(), self.city(), self.city()
        while n2 == n:
            n2 = self.name()
        while c2 == c:
            c2 = self.city()
        np1, np2 = self.np(), self.np()
        T = [
            lambda: f"{n} {r.choice(EN_VERBS_PAST)} {np1} in {c}.",
            lambda: f"The meeting is on {self.date()} at {self.time()}.",
            lambda: f"Can you {r.choice(EN_VERBS_BASE)} {np1} before {self.day()}?",
            lambda: f"It costs {self.money()}, which is {self.pct()} less than last year.",
            lambda: f"On {self.date()}, {n} flew from {c} to {c2}.",
            lambda: f"There are {self.count()} {_plural_en(self.noun())} in {self.place()}.",
            lambda: f"Please call {n} at {self.time()} on {self.day()}.",
            lambda: f"The temperature in {c} reached {r.randint(2, 40)} degrees {self.when()}.",
            lambda: f"Our team sold {self.count()} {_plural_en(self.noun())} in {self.month()} {self.year()}.",
            lambda: f"Where did {n} put {np1}?",
            lambda: f"How many {_plural_en(self.noun())} do you need for {self.day()}?",
            lambda: f"Did you see {n} in {c} {self.when()}?",
            lambda: f"My {self.job()} lives in {c}, but {r.choice(['she', 'he'])} works in {c2}.",
            lambda: f"{n} is {_an(self.job())} and {n2} is {_an(self.job())}.",
            lambda: f"The train to {c} leaves at {self.time()} from platform {r.randint(1, 20)}.",
            lambda: f"I think {np1} is {self.adj()}.",
            lambda: f"We walked {self.decimal()} kilometres to {self.place()}.",
            lambda: f"The weather in {c} was {r.choice(EN_WEATHER)} {self.when()}.",
            lambda: f"{n} was born on {self.date()} in {c}.",
            lambda: f"Is {np1} still in {self.place()}?",
            lambda: f"The {self.noun()} costs {self.money()} and the {self.noun()} costs {self.money()}.",
            lambda: f"Prices rose by {self.pct()} in {self.year()}.",
            lambda: f"{n} and {n2} {r.choice(EN_VERBS_PAST)} {np1} {self.when()}.",
            lambda: f"Why is {np1} so {self.adj()}?",
            lambda: f"Room {r.randint(100, 999)} is on the {_ordinal_en(r.randint(1, 12))} floor.",
            lambda: f"The {self.adj()} {self.noun()} is next to {np2}.",
            lambda: f"We need {r.randint(2, 12)} {_plural_en(self.noun())}, {r.randint(2, 12)} "
                    f"{_plural_en(self.noun())} and {r.randint(2, 30)} {_plural_en(self.noun())}.",
            lambda: f"When does {np1} arrive in {c}?",
            lambda: f"The {self.job()} from {c} {r.choice(EN_VERBS_PAST)} {np1}.",
            lambda: f"Between {self.time()} and {self.time()}, {n} was at {self.place()}.",
            lambda: f"About {self.count()} {r.choice(EN_UNITS)} were counted in {self.year()}.",
            lambda: f"Do you know where {n} left {np1}?",
            lambda: f"It took {r.randint(2, 59)} minutes to get from {c} to {c2}.",
            lambda: f"{n} {r.choice(EN_VERBS_PAST)} {np1}, and {n2} {r.choice(EN_VERBS_PAST)} {np2}.",
            lambda: f"The concert on {self.day()} starts at {self.time()}.",
            lambda: f"Only {self.pct()} of the {_plural_en(self.noun())} were {self.adj()}.",
            lambda: f"What time is it in {c}?",
            lambda: f"{n} has lived in {c} since {self.year()}.",
            lambda: f"The {self.noun()} weighs {self.decimal()} kilograms.",
            lambda: f"See you on {self.day()}, {n}.",
            lambda: f"Yes, {np1} is {self.adj()}, but {np2} is {self.adj()}.",
            lambda: f"Thank you, {n}, the {self.noun()} was {self.adj()}.",
        ]
        s = r.choice(T)()
        if r.random() < 0.12:  # occasionally two sentences in one utterance
            s2 = r.choice(T)()
            if len(s) + len(s2) < 120:
                s = s + " " + s2
        return s[0].upper() + s[1:]


# ----------------------------------------------------------------------------------------------------------------
# German
# ----------------------------------------------------------------------------------------------------------------
DE_NAMES = """Anna Peter Maria Jonas Lukas Sophie Thomas Emma Daniel Laura Michael Sarah David Julia Stefan Lena
Felix Klara Paul Hanna Martin Mia Simon Lea Tobias Greta Jan Marie Florian Nina Moritz Johanna Leon Frieda Max Ida
Niklas Paula Anton Luise Sebastian Katrin Matthias Ute Jürgen Birgit Hans Sabine Uwe Petra""".split()
DE_CITIES = """Berlin Hamburg München Köln Frankfurt Stuttgart Düsseldorf Leipzig Dresden Hannover Bremen Nürnberg
Wien Zürich Bern Basel Graz Salzburg Bonn Mainz Kiel Lübeck Rostock Potsdam Freiburg Heidelberg Ulm Augsburg Kassel
Münster Paris London Rom Madrid Prag Oslo Amsterdam Brüssel Lissabon Warschau""".split()
DE_DAYS = "Montag Dienstag Mittwoch Donnerstag Freitag Samstag Sonntag".split()
DE_MONTHS = "Januar Februar März April Mai Juni Juli August September Oktober November Dezember".split()
# (singular, gender m/f/n, plural)
DE_NOUNS = [
    ("Tisch", "m", "Tische"), ("Stuhl", "m", "Stühle"), ("Brief", "m", "Briefe"), ("Schlüssel", "m", "Schlüssel"),
    ("Computer", "m", "Computer"), ("Koffer", "m", "Koffer"), ("Garten", "m", "Gärten"), ("Zug", "m", "Züge"),
    ("Bahnhof", "m", "Bahnhöfe"), ("Vertrag", "m", "Verträge"), ("Bericht", "m", "Berichte"), ("Kuchen", "m", "Kuchen"),
    ("Apfel", "m", "Äpfel"), ("Hund", "m", "Hunde"), ("Schrank", "m", "Schränke"), ("Wagen", "m", "Wagen"),
    ("Film", "m", "Filme"), ("Plan", "m", "Pläne"), ("Markt", "m", "Märkte"), ("Hafen", "m", "Häfen"),
    ("Lampe", "f", "Lampen"), ("Tasche", "f", "Taschen"), ("Karte", "f", "Karten"), ("Brücke", "f", "Brücken"),
    ("Straße", "f", "Straßen"), ("Kirche", "f", "Kirchen"), ("Schule", "f", "Schulen"), ("Flasche", "f", "Flaschen"),
    ("Rechnung", "f", "Rechnungen"), ("Zeitung", "f", "Zeitungen"), ("Wohnung", "f", "Wohnungen"),
    ("Katze", "f", "Katzen"), ("Tür", "f", "Türen"), ("Uhr", "f", "Uhren"), ("Jacke", "f", "Jacken"),
    ("Kamera", "f", "Kameras"), ("Idee", "f", "Ideen"), ("Frage", "f", "Fragen"), ("Insel", "f", "Inseln"),
    ("Buch", "n", "Bücher"), ("Auto", "n", "Autos"), ("Haus", "n", "Häuser"), ("Fenster", "n", "Fenster"),
    ("Fahrrad", "n", "Fahrräder"), ("Telefon", "n", "Telefone"), ("Paket", "n", "Pakete"), ("Bild", "n", "Bilder"),
    ("Hotel", "n", "Hotels"), ("Museum", "n", "Museen"), ("Theater", "n", "Theater"), ("Brot", "n", "Brote"),
    ("Glas", "n", "Gläser"), ("Zimmer", "n", "Zimmer"), ("Problem", "n", "Probleme"), ("Konzert", "n", "Konzerte"),
    ("Ticket", "n", "Tickets"), ("Geschenk", "n", "Geschenke"), ("Rezept", "n", "Rezepte"), ("Dorf", "n", "Dörfer"),
]
DE_ART = {"nom": {"m": "der", "f": "die", "n": "das"}, "acc": {"m": "den", "f": "die", "n": "das"},
          "dat": {"m": "dem", "f": "der", "n": "dem"}}
DE_INDEF = {"nom": {"m": "ein", "f": "eine", "n": "ein"}, "acc": {"m": "einen", "f": "eine", "n": "ein"},
            "dat": {"m": "einem", "f": "einer", "n": "einem"}}
DE_ADJS = """rot blau grün gelb schwarz weiß alt neu klein groß schwer leicht billig teuer leise laut sauber warm
kalt schön seltsam modern leer voll kaputt berühmt einfach schwierig dunkel hell lang kurz freundlich""".split()
DE_VERBS_PERF = """gefunden gekauft verkauft gestrichen geputzt geöffnet geschlossen repariert besucht getragen geliehen
verloren bestellt geliefert gepackt gewaschen beschrieben fotografiert vergessen gebraucht""".split()
DE_VERBS_INF = """finden kaufen verkaufen streichen putzen öffnen schließen reparieren besuchen tragen leihen
bestellen liefern packen waschen beschreiben fotografieren brauchen""".split()
DE_JOBS = """Lehrerin Arzt Ärztin Ingenieur Fahrer Bäcker Bäuerin Pilotin Anwalt Kellner Autorin Maler Student
Managerin Musiker Köchin Zahnarzt Gärtner Bibliothekarin Schneider""".split()
DE_PLACES = ["im Büro", "in der Bibliothek", "im Museum", "im Krankenhaus", "in der Schule", "in der Bäckerei",
             "auf dem Markt", "am Flughafen", "im Hotel", "am Hafen", "am Strand", "im Park", "in der Bank",
             "auf der Post", "in der Stadt", "im Garten", "in der Küche", "am Bahnhof"]
DE_UNITS = ["Kilometer", "Meter", "Kilogramm", "Liter", "Minuten", "Stunden", "Tage", "Wochen", "Jahre",
            "Menschen", "Studenten", "Bücher", "Karten", "Äpfel", "Autos", "Seiten", "Grad", "Punkte"]
DE_WEATHER = ["sonnig", "regnerisch", "bewölkt", "windig", "kalt", "warm", "neblig", "heiß", "trocken", "nass"]
DE_TIME_WORDS = ["heute Morgen", "heute Nachmittag", "heute Abend", "gestern", "heute", "morgen", "letzte Woche",
                 "nächste Woche", "letzten Monat", "nächsten Monat", "letztes Jahr", "nächstes Jahr"]


class GermanGen:
    def __init__(self, rng):
        self.r = rng

    def name(self): return self.r.choice(DE_NAMES)
    def city(self): return self.r.choice(DE_CITIES)
    def day(self): return self.r.choice(DE_DAYS)
    def month(self): return self.r.choice(DE_MONTHS)
    def adj(self): return self.r.choice(DE_ADJS)
    def job(self): return self.r.choice(DE_JOBS)
    def place(self): return self.r.choice(DE_PLACES)
    def when(self): return self.r.choice(DE_TIME_WORDS)
    def nounrec(self): return self.r.choice(DE_NOUNS)

    def np(self, case="acc", definite=None):
        w, g, _ = self.nounrec()
        if definite is None:
            definite = self.r.random() < 0.7
        art = (DE_ART if definite else DE_INDEF)[case][g]
        return f"{art} {w}"

    def plural(self): return self.nounrec()[2]

    def count(self):
        r = self.r.random()
        if r < 0.4:
            return self.r.randint(2, 20)
        if r < 0.7:
            return self.r.randint(21, 99)
        if r < 0.9:
            return self.r.randint(100, 999)
        return self.r.randint(1000, 9999)

    def year(self): return self.r.randint(1950, 2035)

    def date(self):
        d = self.r.randint(1, 28)
        k = self.r.random()
        if k < 0.6:
            return f"{d}. {self.month()} {self.year()}"
        return f"{d}. {self.month()}"

    def time(self):
        h = self.r.randint(1, 23)
        mnt = self.r.choice([5, 10, 15, 20, 25, 30, 35, 40, 45, 50, 55, 12, 18, 27, 33, 48])
        return f"{h}:{mnt:02d} Uhr"

    def money(self):
        k = self.r.random()
        if k < 0.5:
            return f"{self.r.randint(2, 999)} Euro"
        if k < 0.85:
            return f"{self.r.randint(1, 99)},{self.r.randint(10, 99)} Euro"
        return f"{self.r.randint(2, 500)} Dollar"

    def pct(self): return f"{self.r.randint(2, 95)} %"

    def decimal(self): return f"{self.r.randint(0, 20)},{self.r.randint(1, 9)}"

    def sentence(self):
        r = self.r
        n, n2, c, c2 = self.name(), self.name(), self.city(), self.city()
        while n2 == n:
            n2 = self.name()
        while c2 == c:
            c2 = self.city()
        T = [
            lambda: f"{n} hat {self.np('acc')} in {c} {r.choice(DE_VERBS_PERF)}.",
            lambda: f"Das Treffen ist am {self.date()} um {self.time()}.",
            lambda: f"Kannst du {self.np('acc')} bis {self.day()} {r.choice(DE_VERBS_INF)}?",
            lambda: f"Es kostet {self.money()}, das sind {self.pct()} weniger als letztes Jahr.",
            lambda: f"Am {self.date()} flog {n} von {c} nach {c2}.",
            lambda: f"Es gibt {self.count()} {self.plural()} {self.place()}.",
            lambda: f"Bitte ruf {n} am {self.day()} um {self.time()} an.",
            lambda: f"In {c} waren es {self.when()} {r.randint(2, 40)} Grad.",
            lambda: f"Unser Team hat im {self.month()} {self.year()} {self.count()} {self.plural()} verkauft.",
            lambda: f"Wo hat {n} {self.np('acc', True)} hingelegt?",
            lambda: f"Wie viele {self.plural()} brauchst du am {self.day()}?",
            lambda: f"Hast du {n} {self.when()} in {c} gesehen?",
            lambda: f"{n} wohnt in {c}, arbeitet aber in {c2}.",
            lambda: f"{n} ist {self.job()} und {n2} ist {self.job()}.",
            lambda: f"Der Zug nach {c} fährt um {self.time()} von Gleis {r.randint(1, 20)} ab.",
            lambda: f"Ich finde, {self.np('nom', True)} ist {self.adj()}.",
            lambda: f"Wir sind {self.decimal()} Kilometer {self.place()} gelaufen.",
            lambda: f"Das Wetter in {c} war {self.when()} {r.choice(DE_WEATHER)}.",
            lambda: f"{n} wurde am {self.date()} in {c} geboren.",
            lambda: f"Ist {self.np('nom', True)} noch {self.place()}?",
            lambda: f"{self.np('nom', True).capitalize()} kostet {self.money()}.",
            lambda: f"Die Preise sind {self.year()} um {self.pct()} gestiegen.",
            lambda: f"{n} und {n2} haben {self.when()} {self.np('acc')} {r.choice(DE_VERBS_PERF)}.",
            lambda: f"Warum ist {self.np('nom', True)} so {self.adj()}?",
            lambda: f"Zimmer {r.randint(100, 999)} ist im {r.randint(1, 12)}. Stock.",
            lambda: f"{self.np('nom', True).capitalize()} steht neben {self.np('dat', True)}.",
            lambda: f"Wir brauchen {r.randint(2, 12)} {self.plural()}, {r.randint(2, 12)} {self.plural()} und "
                    f"{r.randint(2, 30)} {self.plural()}.",
            lambda: f"Wann kommt {self.np('nom', True)} in {c} an?",
            lambda: f"Zwischen {self.time()} und {self.time()} war {n} {self.place()}.",
            lambda: f"Im Jahr {self.year()} wurden etwa {self.count()} {r.choice(DE_UNITS)} gezählt.",
            lambda: f"Weißt du, wo {n} {self.np('acc', True)} gelassen hat?",
            lambda: f"Von {c} nach {c2} brauchten wir {r.randint(2, 59)} Minuten.",
            lambda: f"{n} hat {self.np('acc')} {r.choice(DE_VERBS_PERF)}, und {n2} hat {self.np('acc')} "
                    f"{r.choice(DE_VERBS_PERF)}.",
            lambda: f"Das Konzert am {self.day()} beginnt um {self.time()}.",
            lambda: f"Nur {self.pct()} der {self.plural()} waren {self.adj()}.",
            lambda: f"Wie spät ist es in {c}?",
            lambda: f"{n} lebt seit {self.year()} in {c}.",
            lambda: f"{self.np('nom', True).capitalize()} wiegt {self.decimal()} Kilogramm.",
            lambda: f"Bis {self.day()}, {n}.",
            lambda: f"Ja, {self.np('nom', True)} ist {self.adj()}, aber {self.np('nom', True)} ist {self.adj()}.",
            lambda: f"Danke, {n}, {self.np('nom', True)} war {self.adj()}.",
            lambda: f"Der {r.choice(['neue', 'alte', 'kleine', 'große'])} {r.choice(['Plan', 'Bericht', 'Vertrag'])}"
                    f" liegt {self.place()}.",
        ]
        s = r.choice(T)()
        if r.random() < 0.12:
            s2 = r.choice(T)()
            if len(s) + len(s2) < 120:
                s = s + " " + s2
        return s[0].upper() + s[1:]


def normalize(text):
    """Normalisation used for WER and for de-duplication: NFC, lower-case, punctuation removed except inside
    numbers (3:30, 45.99, 45,99, 12. stays 12), whitespace collapsed."""
    t = unicodedata.normalize("NFC", text).lower()
    t = re.sub(r"(?<=\d)[.,:](?=\d)", lambda m: {".": "\x01", ",": "\x02", ":": "\x03"}[m.group(0)], t)
    t = re.sub(r"[^\w\s%$\x01\x02\x03']", " ", t)
    t = t.replace("\x01", ".").replace("\x02", ",").replace("\x03", ":")
    t = t.replace("%", " %").replace("$", "$ ")
    return " ".join(t.split())


def generate(lang, n, seed):
    """n distinct sentences (distinct after normalize) for lang in {en, de}."""
    rng = random.Random(f"{lang}-{seed}")
    gen = EnglishGen(rng) if lang == "en" else GermanGen(rng)
    out, seen = [], set()
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 50 * n + 1000:
            raise RuntimeError("template space too small")
        s = gen.sentence()
        k = normalize(s)
        if k in seen:
            continue
        seen.add(k)
        out.append(s)
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--lang", default="en")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    for s in generate(a.lang, a.n, a.seed):
        print(s, "|", normalize(s))
