// English ITN date class: "july twenty fifth twenty twelve" -> "july 25 2012",
// "the twenty fifth of july twenty twelve" -> "25 july 2012", "october
// nineteen oh five" -> "october 1905", years read in pairs ("nineteen ninety
// four" -> 1994), decades ("nineteen eighties" -> 1980s) and quarters
// ("second quarter of twenty twenty two" -> "Q2 2022"). Month words keep
// their case; "may"/"march" need a clear date context.
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

bool is_month(std::string_view w) {
    static constexpr std::string_view kMonths[] = {"january", "february", "march", "april", "may", "june", "july",
                                                   "august", "september", "october", "november", "december"};
    for (auto m : kMonths) if (m == w) return true;
    return false;
}

struct Part { std::string text; size_t end; bool ordinal; };

std::optional<Part> parse_day(const Ctx& c, size_t p) {
    if (c.hyph(p)) return std::nullopt;
    if (auto o = parse_ordinal(c.run, p); o && o->value >= 1 && o->value <= 31)
        return Part{std::to_string(o->value), o->end, true};
    if (auto k = parse_cardinal(c.seq(), p, false); k && k->value >= 1 && k->value <= 31)
        return Part{std::to_string(k->value), k->end, false};
    return std::nullopt;
}

std::optional<Part> parse_year(const Ctx& c, size_t p) {
    if (c.hyph(p)) return std::nullopt;
    std::optional<Part> best;
    if (auto y = parse_year_pairs(c.seq(), p)) best = Part{y->digits, y->end, false};
    if (auto k = parse_cardinal(c.seq(), p, false); k && k->value >= 1000 && k->value <= 2999 && k->words >= 2)
        if (!best || k->end > best->end) best = Part{std::to_string(k->value), k->end, false};
    return best;
}

bool month_ok(const Ctx& c, size_t m, bool strong) {
    std::string_view w = c.lw(m);
    if (w != "may" && w != "march") return true;
    if (strong) return true;
    if (m > 0) {
        std::string_view p = c.lw(m - 1);
        if (p == "in" || p == "of" || p == "on" || p == "since" || p == "until" || p == "by" || p == "from" ||
            p == "early" || p == "late" || p == "mid" || p == "last" || p == "next")
            return true;
    }
    return false;
}

int decade_value(std::string_view w) {
    static constexpr std::string_view kDecades[] = {"twenties", "thirties", "forties", "fifties",
                                                    "sixties", "seventies", "eighties", "nineties"};
    for (size_t k = 0; k < 8; ++k) if (kDecades[k] == w) return static_cast<int>(20 + 10 * k);
    return -1;
}

} // namespace

std::optional<Match> match_date(const Ctx& c, size_t i) {
    std::optional<Match> best;
    auto consider = [&](Match m) { if (!best || m.end > best->end) best = std::move(m); };

    // [the] DAY of MONTH [YEAR]
    {
        size_t p = i;
        if (c.lw(p) == "the") ++p;
        if (auto d = parse_day(c, p); d && d->ordinal && c.lw(d->end) == "of" && is_month(c.lw(d->end + 1)) &&
                                      !c.hyph(d->end) && !c.hyph(d->end + 1)) {
            size_t m = d->end + 1;
            Match r{m + 1, d->text + " " + std::string(c.ow(m))};
            if (auto y = parse_year(c, m + 1)) { r.out += " " + y->text; r.end = y->end; }
            consider(r);
        }
    }
    // MONTH DAY [YEAR] | MONTH YEAR
    if (is_month(c.lw(i))) {
        std::string month(c.ow(i));
        if (auto d = parse_day(c, i + 1); d && month_ok(c, i, d->ordinal || c.run[i].capitalized())) {
            Match r{d->end, month + " " + d->text};
            if (auto y = parse_year(c, d->end)) { r.out += " " + y->text; r.end = y->end; }
            consider(r);
        }
        if (auto y = parse_year(c, i + 1); y && month_ok(c, i, c.run[i].capitalized()))
            consider(Match{y->end, month + " " + y->text});
    }
    // ORDINAL quarter of YEAR
    if (auto o = parse_ordinal(c.run, i); o && o->value >= 1 && o->value <= 4 && c.lw(o->end) == "quarter" &&
                                          c.lw(o->end + 1) == "of") {
        if (auto y = parse_year(c, o->end + 2))
            consider(Match{y->end, "Q" + std::to_string(o->value) + " " + y->text});
    }
    // Year alone, decades.
    if (auto y = parse_year_pairs(c.seq(), i)) consider(Match{y->end, y->digits});
    {
        Seq s = c.seq();
        auto g = parse_groups(s, i, 1);
        if (g && g->first >= 10 && g->first <= 20) {
            int d = decade_value(c.lw(g->end));
            if (d > 0 && !c.hyph(g->end)) consider(Match{g->end + 1, g->digits + std::to_string(d) + "s"});
            if (c.lw(g->end) == "hundreds" && !c.hyph(g->end)) consider(Match{g->end + 1, g->digits + "00s"});
        }
    }
    return best;
}

} // namespace qasr::itn::en
