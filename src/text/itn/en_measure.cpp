// English ITN measure class (incl. percent): amount + unit phrase ->
// "amount symbol", e.g. "two kilo watt hours" -> "2 kWh", "eighteen point six
// percent" -> "18.6 %", "two hundred forty five miles per hour" -> "245 mph",
// "fifty six point three per square kilometer" -> "56.3 /km²". Metric units
// are composed from an SI prefix word and a base unit, written joined or apart.
#include "en_classes.hpp"

#include <array>

namespace qasr::itn::en {

namespace {

struct Unit { std::string sym; size_t end = 0; bool metric_length = false; bool imperial = false; bool timeish = false; };

struct Base { std::string_view sing, plur, sym; bool length; };
constexpr std::array<Base, 22> kMetricBases = {{
    {"amp", "amps", "A", false}, {"ampere", "amperes", "A", false}, {"pascal", "pascals", "pa", false},
    {"joule", "joules", "j", false}, {"calorie", "calories", "cal", false}, {"newton", "newtons", "n", false},
    {"farad", "farads", "f", false}, {"becquerel", "becquerels", "bq", false}, {"sievert", "sieverts", "sv", false},
    {"dalton", "daltons", "da", false},
    {"meter", "meters", "m", true}, {"metre", "metres", "m", true}, {"gram", "grams", "g", false},
    {"liter", "liters", "l", false}, {"litre", "litres", "l", false}, {"watt", "watts", "W", false},
    {"volt", "volts", "v", false}, {"hertz", "hertz", "hz", false}, {"byte", "bytes", "b", false},
    {"bit", "bits", "b", false}, {"siemens", "siemens", "s", false}, {"second", "seconds", "s", false},
}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kPrefixes = {{
    {"kilo", "k"}, {"mega", "m"}, {"giga", "g"}, {"tera", "t"}, {"peta", "p"}, {"hecto", "h"},
    {"milli", "m"}, {"micro", "μ"}, {"nano", "n"}, {"centi", "c"}, {"deci", "d"}}};

struct Plain { std::string_view w1, w2; std::string_view sym; bool imperial; bool timeish; };
constexpr Plain kPlain[] = {
    {"hour", "", "h", false, true}, {"hours", "", "h", false, true},
    {"minute", "", "min", false, true}, {"minutes", "", "min", false, true},
    {"second", "", "s", false, true}, {"seconds", "", "s", false, true},
    {"foot", "", "ft", true, false}, {"feet", "", "ft", true, false},
    {"inch", "", "in", true, false}, {"inches", "", "in", true, false},
    {"yard", "", "yd", true, false}, {"yards", "", "yd", true, false},
    {"mile", "", "mi", true, false}, {"miles", "", "mi", true, false},
    {"hectare", "", "ha", false, false}, {"hectares", "", "ha", false, false},
    {"acre", "", "ac", false, false}, {"acres", "", "ac", false, false},
    {"horsepower", "", "hp", false, false}, {"horse", "power", "hp", false, false}, {"lumen", "", "lm", false, false}, {"lumens", "", "lm", false, false},
    {"ounce", "", "oz", false, false}, {"ounces", "", "oz", false, false},
    {"pound", "", "lb", false, false}, {"pounds", "", "lb", false, false},
    {"ton", "", "t", false, false}, {"tons", "", "t", false, false}, {"tonne", "", "t", false, false},
    {"tonnes", "", "t", false, false},
    {"percent", "", "%", false, false}, {"per", "cent", "%", false, false},
    {"astronomical", "unit", "au", false, false}, {"astronomical", "units", "au", false, false},
    {"c", "c", "cc", false, false},
    {"degrees", "celsius", "°C", false, false}, {"degree", "celsius", "°C", false, false},
    {"degrees", "fahrenheit", "°F", false, false}, {"degree", "fahrenheit", "°F", false, false},
    {"celsius", "", "°C", false, false}, {"fahrenheit", "", "°F", false, false},
    {"kelvin", "", "K", false, false}, {"degrees", "", "°", false, false}, {"degree", "", "°", false, false},
    {"light", "years", "ly", false, false}, {"light", "year", "ly", false, false},
    {"gallons", "", "gal", true, false}, {"gallon", "", "gal", true, false},
    {"decibels", "", "db", false, false}, {"decibel", "", "db", false, false},
    {"knots", "", "kt", false, false}, {"knot", "", "kt", false, false},
    {"atmospheres", "", "atm", false, false}, {"atmosphere", "", "atm", false, false},
    {"electron", "volts", "ev", false, false}, {"electron", "volt", "ev", false, false},
    {"candela", "", "cd", false, false}, {"radians", "", "rad", false, false}, {"radian", "", "rad", false, false},
    {"ohms", "", "Ω", false, false}, {"ohm", "", "Ω", false, false},
};

std::optional<Base> metric_base(std::string_view w) {
    for (const auto& b : kMetricBases) if (w == b.sing || w == b.plur) return b;
    return std::nullopt;
}

// Base unit (without square/cubic/per) at p.
std::optional<Unit> parse_simple_unit(const Ctx& c, size_t p, bool allow_bare_second) {
    std::string_view w = c.lw(p);
    if (w.empty() || c.hyph(p)) return std::nullopt;
    for (const auto& [pw, ps] : kPrefixes) {
        if (w.size() > pw.size() && w.substr(0, pw.size()) == pw) {
            if (auto b = metric_base(w.substr(pw.size()))) {
                Unit u{std::string(ps) + std::string(b->sym), p + 1, b->length, false, false};
                if (b->sym == "W" && (c.lw(p + 1) == "hour" || c.lw(p + 1) == "hours")) { u.sym += "h"; ++u.end; }
                return u;
            }
        }
        if (w == pw) {
            if (auto b = metric_base(c.lw(p + 1)); b && !c.hyph(p + 1)) {
                Unit u{std::string(ps) + std::string(b->sym), p + 2, b->length, false, false};
                if (b->sym == "W" && (c.lw(p + 2) == "hour" || c.lw(p + 2) == "hours")) { u.sym += "h"; ++u.end; }
                return u;
            }
        }
    }
    if (auto b = metric_base(w); b && b->sym != "s") {
        Unit u{std::string(b->sym), p + 1, b->length, false, false};
        if (b->sym == "W" && (c.lw(p + 1) == "hour" || c.lw(p + 1) == "hours")) { u.sym += "h"; ++u.end; }
        return u;
    }
    for (const auto& e : kPlain) {
        if (w != e.w1) continue;
        size_t q = p + 1;
        if (!e.w2.empty()) { if (c.lw(q) != e.w2 || c.hyph(q)) continue; ++q; }
        if (e.sym == "s" && !allow_bare_second) continue;
        return Unit{std::string(e.sym), q, false, e.imperial, e.timeish};
    }
    return std::nullopt;
}

// Unit with optional square/cubic and per-phrase.
std::optional<Unit> parse_unit(const Ctx& c, size_t p, bool allow_bare_second) {
    auto powered = [&](size_t q) -> std::optional<Unit> {
        std::string_view w = c.lw(q);
        int power = w == "square" ? 2 : w == "cubic" ? 3 : 0;
        if (power == 0) return parse_simple_unit(c, q, allow_bare_second);
        auto u = parse_simple_unit(c, q + 1, false);
        if (!u || c.hyph(q + 1)) return std::nullopt;
        if (u->imperial) u->sym = (power == 2 ? "sq " : "cu ") + u->sym;
        else if (u->metric_length) u->sym += power == 2 ? "²" : "³";
        else return std::nullopt;
        return u;
    };
    if ((c.lw(p) == "revolutions" || c.lw(p) == "revolution") && c.lw(p + 1) == "per" && c.lw(p + 2) == "minute")
        return Unit{"rpm", p + 3, false, false, false};
    auto u = powered(p);
    if (!u) return std::nullopt;
    if (u->metric_length && (c.lw(u->end) == "squared" || c.lw(u->end) == "cubed") && !c.hyph(u->end)) {
        u->sym += c.lw(u->end) == "squared" ? "²" : "³"; // "meters squared"
        ++u->end;
    }
    if (c.lw(u->end) == "per" && !c.hyph(u->end)) {
        size_t q = u->end + 1;
        std::string_view w = c.lw(q);
        if (u->sym == "mi" && w == "hour") return Unit{"mph", q + 1, false, false, false};
        if (u->sym == "mi" && w == "gallon") return Unit{"mpg", q + 1, false, false, false};
        if (u->sym.size() >= 1 && u->sym.back() == 'b' && w == "second" && !u->metric_length) {
            // bits per second -> bps ("gigabits per second" -> gbps)
            return Unit{u->sym + "ps", q + 1, false, false, false};
        }
        if (auto d = powered(q)) return Unit{u->sym + "/" + d->sym, d->end, false, false, false};
        if (w == "second" || w == "minute" || w == "hour") {
            std::string_view sym = w == "second" ? "s" : w == "minute" ? "min" : "h";
            return Unit{u->sym + "/" + std::string(sym), q + 1, false, false, false};
        }
    }
    return u;
}

} // namespace

std::optional<Match> match_measure(const Ctx& c, size_t i) {
    Seq s = c.seq();
    auto a = parse_amount(s, i, true);
    if (!a) return std::nullopt;
    size_t p = a->end;
    std::string sym;
    size_t end = 0;
    if (c.lw(p) == "per" && !c.hyph(p)) {
        std::string_view w = c.lw(p + 1);
        if (w == "cent") { sym = "%"; end = p + 2; }
        else {
            auto u = parse_unit(c, p + 1, true);
            if (!u || c.hyph(p + 1)) return std::nullopt;
            sym = "/" + u->sym;
            end = u->end;
        }
    } else {
        auto u = parse_unit(c, p, true);
        if (!u) return std::nullopt;
        // "wait one second", "one minute": idiomatic, keep words.
        if (u->timeish && a->is_one && a->words == 1 && (c.lw(p) == "second" || c.lw(p) == "minute"))
            return std::nullopt;
        // "forty second" is the ordinal 42nd, not 40 seconds.
        if (c.lw(p) == "second" && !a->is_one) return std::nullopt;
        sym = u->sym;
        end = u->end;
    }
    Match m;
    m.end = end;
    m.out = a->text;
    if (!a->scale_word.empty()) m.out += " " + a->scale_word;
    m.out += " " + sym;
    return m;
}

} // namespace qasr::itn::en
