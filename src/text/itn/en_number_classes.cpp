// English ITN classes built directly on number words: cardinal and decimal
// ("two hundred and fifty four" -> 254, "five point two million" ->
// "5.2 million") and ordinal ("twenty third" -> 23rd). Style decisions:
// single-word cardinals zero..twelve stay words ("one of the best"), and
// first..ninth stay words in running text (only converted when they are the
// whole utterance). See docs/itn.md and tests/itn/style_differences.md.
#include "en_classes.hpp"

namespace qasr::itn::en {

bool Ctx::whole(size_t i, size_t end) const {
    if (i >= run.size() || end == 0 || end > run.size()) return false;
    return run[i].begin == content_begin && run[end - 1].end == content_end;
}

bool is_single_letter(std::string_view w) { return w.size() == 1 && w[0] >= 'a' && w[0] <= 'z'; }

bool is_function_word(std::string_view w) {
    static constexpr std::string_view kWords[] = {
        "the", "a", "an", "of", "and", "or", "to", "in", "on", "at", "for", "with", "by", "from",
        "is", "are", "was", "were", "be", "it", "this", "that", "these", "those", "his", "her",
        "my", "your", "our", "their", "its", "he", "she", "we", "they", "you", "i", "me", "him",
        "them", "us", "not", "no", "so", "but", "as", "if", "then", "than", "do", "does", "did"};
    for (auto k : kWords) if (k == w) return true;
    return false;
}

std::optional<Match> match_number(const Ctx& c, size_t i) {
    Seq s = c.seq();
    auto a = parse_amount(s, i, true);
    if (!a) return std::nullopt;
    bool single = a->words == 1 && !a->has_point && a->scale_word.empty();
    if (single) {
        std::string_view w = c.lw(i);
        // zero..twelve said alone stay words ("one of the best"), as in NeMo.
        if (unit_value(w) >= 0 || (teen_value(w) >= 10 && teen_value(w) <= 12)) return std::nullopt;
    }
    Match m;
    m.end = a->end;
    m.out = a->text;
    if (!a->scale_word.empty()) m.out += " " + a->scale_word;
    return m;
}

namespace {

// Denominator words: "half" -> 2, "thirds" -> 3 (plural flag), ... Not
// "second"/"hundredth"/"thousandth", which read as ordinals.
int denominator(std::string_view w, bool& plural) {
    struct D { std::string_view sing, plur; int v; };
    static constexpr D kDen[] = {{"half", "halves", 2}, {"third", "thirds", 3}, {"quarter", "quarters", 4},
                                 {"fourth", "fourths", 4}, {"fifth", "fifths", 5}, {"sixth", "sixths", 6},
                                 {"seventh", "sevenths", 7}, {"eighth", "eighths", 8}, {"ninth", "ninths", 9},
                                 {"tenth", "tenths", 10}};
    for (const auto& d : kDen) {
        if (w == d.sing) { plural = false; return d.v; }
        if (w == d.plur) { plural = true; return d.v; }
    }
    return 0;
}

// "<n> <denominator>" with number agreement: "one third", "two thirds".
std::optional<std::pair<std::string, size_t>> simple_fraction(const Ctx& c, size_t i) {
    auto n = parse_cardinal(c.seq(), i, false);
    if (!n || n->value == 0 || c.hyph(n->end)) return std::nullopt;
    bool plural = false;
    int d = denominator(c.lw(n->end), plural);
    if (d == 0 || plural != (n->value != 1)) return std::nullopt;
    return std::make_pair(std::to_string(n->value) + "/" + std::to_string(d), n->end + 1);
}

} // namespace

// Fractions: "two thirds" -> 2/3, "three and a half" -> "3 1/2",
// "one and three quarters" -> "1 3/4". "a third of" (no number) stays.
std::optional<Match> match_fraction(const Ctx& c, size_t i) {
    auto whole = parse_cardinal(c.seq(), i, true);
    if (whole && c.lw(whole->end) == "and" && !c.hyph(whole->end)) {
        size_t p = whole->end + 1;
        bool plural = false;
        if (c.lw(p) == "a" && denominator(c.lw(p + 1), plural) && !plural)
            return Match{p + 2, whole->digits() + " 1/" + std::to_string(denominator(c.lw(p + 1), plural))};
        if (auto f = simple_fraction(c, p)) return Match{f->second, whole->digits() + " " + f->first};
    }
    if (auto f = simple_fraction(c, i)) return Match{f->second, f->first};
    return std::nullopt;
}

std::optional<Match> match_ordinal(const Ctx& c, size_t i) {
    auto o = parse_ordinal(c.run, i);
    if (!o) return std::nullopt;
    if (o->words == 1 && o->value <= 9 && !c.whole(i, o->end)) return std::nullopt;
    return Match{o->end, std::to_string(o->value) + ordinal_suffix(o->value)};
}

} // namespace qasr::itn::en
