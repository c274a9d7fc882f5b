// English ITN classes built directly on number words: cardinal and decimal
// ("two hundred and fifty four" -> 254, "five point two million" ->
// "5.2 million") and ordinal ("twenty third" -> 23rd). Style decisions:
// single-word cardinals zero..nine stay words ("one of the best"), a
// capitalized single-word cardinal stays (sentence start, "Twelve"), and
// first..ninth stay words in running text (only converted when they are the
// whole utterance). See docs/itn.md and tests/itn/style_differences.md.
#include "en_classes.hpp"

namespace qasr::itn::en {

bool Ctx::whole(size_t i, size_t end) const {
    if (i >= run.size() || end == 0 || end > run.size()) return false;
    size_t b = run[i].begin, e = run[end - 1].end;
    for (size_t k = 0; k < b; ++k)
        if (line[k] != ' ' && line[k] != '\t') return false;
    for (size_t k = e; k < line.size(); ++k) {
        char ch = line[k];
        if (ch != ' ' && ch != '\t' && ch != '\r' && ch != '.' && ch != '!' && ch != '?') return false;
    }
    return true;
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
        if (unit_value(w) >= 0) return std::nullopt;      // zero..nine stay words
        if (c.run[i].capitalized()) return std::nullopt;  // sentence-initial "Twelve"
    }
    Match m;
    m.end = a->end;
    m.out = a->text;
    if (!a->scale_word.empty()) m.out += " " + a->scale_word;
    return m;
}

std::optional<Match> match_ordinal(const Ctx& c, size_t i) {
    auto o = parse_ordinal(c.run, i);
    if (!o) return std::nullopt;
    if (o->words == 1 && o->value <= 9 && !c.whole(i, o->end)) return std::nullopt;
    return Match{o->end, std::to_string(o->value) + ordinal_suffix(o->value)};
}

} // namespace qasr::itn::en
