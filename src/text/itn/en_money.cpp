// English ITN money class: "two point five billion dollars" -> "$2.5 billion",
// "seventy five dollars sixty three" -> "$75.63", "nine hundred ninety three
// dollars and ninety two cents" -> "$993.92", "one cent" -> "$0.01",
// "one fifty five dollars" -> "$155", "thirty billion yen" -> "¥30 billion".
// "one dollars" (number/plural mismatch) is not rewritten.
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

struct Currency {
    std::string_view symbol;
    size_t end = 0;
    bool plural = false;
    bool cents = false;
};

std::optional<Currency> parse_currency(const Ctx& c, size_t p) {
    struct Entry { std::string_view w1, w2, w3; std::string_view sym; bool plural; bool cents; };
    static constexpr Entry kTable[] = {
        {"united", "states", "dollars", "$", true, false}, {"united", "states", "dollar", "$", false, false},
        {"us", "dollars", "", "$", true, false}, {"us", "dollar", "", "$", false, false},
        {"u", "s", "dollars", "$", true, false}, {"u", "s", "dollar", "$", false, false},
        {"dollars", "", "", "$", true, false}, {"dollar", "", "", "$", false, false},
        {"bucks", "", "", "$", true, false},
        {"euros", "", "", "€", true, false}, {"euro", "", "", "€", false, false},
        {"pounds", "sterling", "", "£", true, false}, {"pound", "sterling", "", "£", false, false},
        {"british", "pounds", "", "£", true, false}, {"british", "pound", "", "£", false, false},
        {"yen", "", "", "¥", false, false}, {"won", "", "", "₩", false, false},
        {"indian", "rupees", "", "₹", true, false}, {"rupees", "", "", "₹", true, false},
        {"rupee", "", "", "₹", false, false},
        {"cents", "", "", "$", true, true}, {"cent", "", "", "$", false, true},
    };
    for (const auto& e : kTable) {
        if (c.lw(p) != e.w1) continue;
        size_t q = p + 1;
        if (!e.w2.empty()) { if (c.lw(q) != e.w2 || c.hyph(q)) continue; ++q; }
        if (!e.w3.empty()) { if (c.lw(q) != e.w3 || c.hyph(q)) continue; ++q; }
        if (c.hyph(p)) return std::nullopt;
        bool invariant = e.w1 == "yen" || e.w1 == "won";
        return Currency{e.sym, q, e.plural || invariant, e.cents};
    }
    return std::nullopt;
}

std::string two_digits(uint64_t v) { return (v < 10 ? "0" : "") + std::to_string(v); }

} // namespace

std::optional<Match> match_money(const Ctx& c, size_t i) {
    Seq s = c.seq();
    std::string amount, scale;
    bool is_one = false, integer = false;
    uint64_t int_value = 0;
    std::optional<Currency> cur;
    if (auto a = parse_amount(s, i, true)) {
        cur = parse_currency(c, a->end);
        if (cur) {
            amount = a->text; scale = a->scale_word; is_one = a->is_one;
            integer = !a->has_point && a->scale_word.empty() && a->text[0] != '-';
            if (integer) int_value = std::stoull(a->text);
        }
    }
    if (!cur) {
        // "one fifty five dollars" = "one hundred fifty five": a digit then a two-digit group.
        auto g = parse_groups(s, i, 2);
        if (!g || g->groups != 2 || g->last_hundred || g->first > 9 || g->digits.size() != 3) return std::nullopt;
        cur = parse_currency(c, g->end);
        if (!cur || cur->cents) return std::nullopt;
        amount = g->digits; integer = true; int_value = std::stoull(amount);
    }
    if (is_one && cur->plural && cur->symbol == "$" && !cur->cents) return std::nullopt; // "One dollars"
    if (cur->cents) {
        if (!integer || int_value > 99) return std::nullopt;
        return Match{cur->end, "$0." + two_digits(int_value)};
    }
    Match m;
    m.end = cur->end;
    m.out = std::string(cur->symbol) + amount;
    if (!scale.empty()) { m.out += " " + scale; return m; }
    // Cents part: "... dollars [and] sixty three [cents]".
    if (integer && cur->symbol == "$") {
        size_t q = cur->end;
        bool has_and = c.lw(q) == "and";
        if (has_and) ++q;
        auto cents = parse_cardinal(s, q, false);
        if (cents && cents->value >= 1 && cents->value <= 99 && !c.hyph(q)) {
            auto cw = parse_currency(c, cents->end);
            bool cents_word = cw && cw->cents;
            if (cents_word || (!has_and && !parse_currency(c, cents->end))) {
                if (!cents_word && scale_value(c.lw(cents->end)) != 0) return m;
                m.out += "." + two_digits(cents->value);
                m.end = cents_word ? cw->end : cents->end;
            }
        }
    }
    return m;
}

} // namespace qasr::itn::en
