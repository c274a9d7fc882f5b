// English number-word parsing (see en_numbers.hpp). Tables are static const
// and looked up by linear scan over short arrays (a few dozen entries), which
// is fast enough and keeps the code allocation-free.
#include "en_numbers.hpp"

#include <array>
#include <utility>

namespace qasr::itn::en {

namespace {

constexpr std::array<std::string_view, 10> kUnits = {"zero", "one", "two", "three", "four",
                                                     "five", "six", "seven", "eight", "nine"};
constexpr std::array<std::string_view, 10> kTeens = {"ten", "eleven", "twelve", "thirteen", "fourteen",
                                                     "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
constexpr std::array<std::string_view, 8> kTens = {"twenty", "thirty", "forty", "fifty",
                                                   "sixty", "seventy", "eighty", "ninety"};
constexpr std::array<std::pair<std::string_view, uint64_t>, 8> kScales = {{
    {"thousand", 1000ULL}, {"lakh", 100000ULL}, {"million", 1000000ULL}, {"crore", 10000000ULL},
    {"billion", 1000000000ULL}, {"trillion", 1000000000000ULL}, {"quadrillion", 1000000000000000ULL},
    {"quintillion", 1000000000000000000ULL}}};
constexpr std::array<std::pair<std::string_view, std::string_view>, 32> kOrdinals = {{
    {"zeroth", "zero"}, {"first", "one"}, {"second", "two"}, {"third", "three"}, {"fourth", "four"},
    {"fifth", "five"}, {"sixth", "six"}, {"seventh", "seven"}, {"eighth", "eight"}, {"ninth", "nine"},
    {"tenth", "ten"}, {"eleventh", "eleven"}, {"twelfth", "twelve"}, {"thirteenth", "thirteen"},
    {"fourteenth", "fourteen"}, {"fifteenth", "fifteen"}, {"sixteenth", "sixteen"},
    {"seventeenth", "seventeen"}, {"eighteenth", "eighteen"}, {"nineteenth", "nineteen"},
    {"twentieth", "twenty"}, {"thirtieth", "thirty"}, {"fortieth", "forty"}, {"fiftieth", "fifty"},
    {"sixtieth", "sixty"}, {"seventieth", "seventy"}, {"eightieth", "eighty"}, {"ninetieth", "ninety"},
    {"hundredth", "hundred"}, {"thousandth", "thousand"}, {"millionth", "million"}, {"billionth", "billion"}}};

bool mul_add(uint64_t& acc, uint64_t v, uint64_t mul) {
    if (v != 0 && mul > UINT64_MAX / v) return false;
    uint64_t p = v * mul;
    if (acc > UINT64_MAX - p) return false;
    acc += p;
    return true;
}

// Value 1..99 from "tens [unit]" | teen | unit starting at k; hyphen only inside tens-unit.
std::optional<std::pair<uint64_t, size_t>> parse_below_100(const Seq& s, size_t k) {
    std::string_view w = s.at(k);
    if (w.empty()) return std::nullopt;
    if (int u = unit_value(w); u >= 1) return std::make_pair(uint64_t(u), k + 1);
    if (int t = teen_value(w); t >= 0) return std::make_pair(uint64_t(t), k + 1);
    if (int t = tens_value(w); t >= 0) {
        if (int u = unit_value(s.at(k + 1)); u >= 1) return std::make_pair(uint64_t(t + u), k + 2);
        return std::make_pair(uint64_t(t), k + 1);
    }
    return std::nullopt;
}

struct Block { uint64_t value; size_t end; bool big_hundred; };

// A block below 1000 ("two hundred and fifty four"), or when allow_big
// "eleven hundred twenty one" (= 1121).
std::optional<Block> parse_block(const Seq& s, size_t k, bool allow_big) {
    auto low = parse_below_100(s, k);
    if (!low) return std::nullopt;
    auto [v, e] = *low;
    if (s.at(e) == "hundred" && !s.hyph(e)) {
        bool big = v >= 10;
        if (big && !allow_big) return Block{v, e, false};
        uint64_t total = v * 100;
        size_t p = e + 1;
        if (s.at(p) == "and" && !s.hyph(p)) {
            if (auto t = parse_below_100(s, p + 1); t && !s.hyph(p + 1)) return Block{total + t->first, t->second, big};
            return Block{total, p, big};
        }
        if (auto t = parse_below_100(s, p); t && !s.hyph(p)) return Block{total + t->first, t->second, big};
        return Block{total, p, big};
    }
    return Block{v, e, false};
}

} // namespace

int unit_value(std::string_view w) {
    for (size_t i = 0; i < kUnits.size(); ++i) if (kUnits[i] == w) return static_cast<int>(i);
    return -1;
}
int teen_value(std::string_view w) {
    for (size_t i = 0; i < kTeens.size(); ++i) if (kTeens[i] == w) return static_cast<int>(10 + i);
    return -1;
}
int tens_value(std::string_view w) {
    for (size_t i = 0; i < kTens.size(); ++i) if (kTens[i] == w) return static_cast<int>(20 + 10 * i);
    return -1;
}
uint64_t scale_value(std::string_view w) {
    for (const auto& [name, v] : kScales) if (name == w) return v;
    return 0;
}
bool is_number_word(std::string_view w) {
    return unit_value(w) >= 0 || teen_value(w) >= 0 || tens_value(w) >= 0 || scale_value(w) != 0 ||
           w == "hundred";
}
int digit_word(std::string_view w) {
    if (w == "o" || w == "oh") return 0;
    return unit_value(w);
}
std::string_view ordinal_base(std::string_view w) {
    for (const auto& [o, c] : kOrdinals) if (o == w) return c;
    return {};
}
std::string ordinal_suffix(uint64_t v) {
    uint64_t m100 = v % 100, m10 = v % 10;
    if (m100 >= 11 && m100 <= 13) return "th";
    if (m10 == 1) return "st";
    if (m10 == 2) return "nd";
    if (m10 == 3) return "rd";
    return "th";
}

std::string Cardinal::digits() const { return (negative ? "-" : "") + std::to_string(value); }

std::optional<Cardinal> parse_cardinal(const Seq& s, size_t k, bool allow_minus) {
    Cardinal c;
    size_t p = k;
    if (allow_minus && (s.at(p) == "minus" || s.at(p) == "negative")) { c.negative = true; ++p; }
    if (s.hyph(p) && p != k) return std::nullopt;
    if (s.at(p) == "zero") {
        c.value = 0; c.end = p + 1; c.words = 1;
        return c;
    }
    uint64_t total = 0, last_scale = UINT64_MAX;
    int blocks = 0;
    size_t start = p;
    while (true) {
        size_t q = p;
        if (blocks > 0 && s.at(q) == "and" && !s.hyph(q)) {
            auto t = parse_below_100(s, q + 1);
            if (t && !s.hyph(q + 1) && last_scale != UINT64_MAX && !scale_value(s.at(t->second))) {
                total += t->first;
                p = t->second;
            }
            break;
        }
        if (blocks > 0 && s.hyph(q)) break;
        auto b = parse_block(s, q, blocks == 0);
        if (!b) break;
        if (b->big_hundred) { total = b->value; p = b->end; ++blocks; break; }
        uint64_t sc = s.hyph(b->end) ? 0 : scale_value(s.at(b->end));
        if (sc != 0 && sc < last_scale) {
            if (!mul_add(total, b->value, sc)) return std::nullopt;
            if (blocks == 0) { c.head = b->value; c.scale_pos = b->end; }
            last_scale = sc;
            p = b->end + 1;
            ++blocks;
            continue;
        }
        if (total > UINT64_MAX - b->value) return std::nullopt;
        total += b->value;
        p = b->end;
        ++blocks;
        break;
    }
    if (blocks == 0) return std::nullopt;
    c.value = total;
    c.end = p;
    c.words = p - start;
    c.head_form = blocks == 1 && last_scale >= 1000000ULL && last_scale != UINT64_MAX && c.scale_pos + 1 == p;
    return c;
}

std::optional<Ordinal> parse_ordinal(const Run& r, size_t k) {
    // Find the first ordinal word at or after k, within a stretch of number words.
    for (size_t j = k; j < r.size() && j < k + 16; ++j) {
        std::string_view base = ordinal_base(r[j].lower);
        if (!base.empty()) {
            Seq s{&r, j, base};
            auto c = parse_cardinal(s, k, false);
            if (!c || c->end != j + 1) return std::nullopt;
            return Ordinal{c->value, j + 1, j + 1 - k};
        }
        if (!is_number_word(r[j].lower) && r[j].lower != "and") return std::nullopt;
    }
    return std::nullopt;
}

std::optional<DigitString> parse_digit_string(const Seq& s, size_t k) {
    DigitString d;
    size_t p = k;
    while (p < s.size() && d.digits.size() < 40) { // bounded: keeps long inputs linear
        if (p > k && s.hyph(p)) break;
        std::string_view w = s.at(p);
        int rep = w == "double" ? 2 : w == "triple" ? 3 : 1;
        size_t q = rep > 1 ? p + 1 : p;
        int v = digit_word(s.at(q));
        if (v < 0) break;
        if (rep > 1 && s.hyph(q)) break;
        d.digits.append(static_cast<size_t>(rep), static_cast<char>('0' + v));
        if (s.at(q) != "o" && s.at(q) != "oh") d.real_digits += static_cast<size_t>(rep);
        p = q + 1;
    }
    if (d.digits.empty()) return std::nullopt;
    d.end = p;
    return d;
}

std::optional<Groups> parse_groups(const Seq& s, size_t k, int max_groups) {
    Groups g;
    size_t p = k;
    while (g.groups < max_groups && p < s.size()) {
        if (p > k && s.hyph(p) && tens_value(s.at(p - 1)) < 0) break;
        std::string_view w = s.at(p);
        if (g.groups > 0 && w == "hundred") {
            g.digits += "00"; ++p; ++g.groups; g.last_hundred = true;
            break;
        }
        if ((w == "o" || w == "oh" || w == "zero") && g.groups > 0) {
            int u = unit_value(s.at(p + 1));
            if (u < 1) break;
            g.digits += '0';
            g.digits += static_cast<char>('0' + u);
            p += 2; ++g.groups;
            continue;
        }
        auto low = parse_below_100(s, p);
        if (!low) break;
        if (g.groups == 0) g.first = static_cast<int>(low->first);
        g.digits += std::to_string(low->first);
        p = low->second;
        ++g.groups;
    }
    if (g.groups == 0) return std::nullopt;
    g.end = p;
    return g;
}

std::optional<Groups> parse_year_pairs(const Seq& s, size_t k) {
    auto first = parse_below_100(s, k);
    if (!first || first->first < 10 || first->first > 29) return std::nullopt;
    auto g = parse_groups(s, k, 2);
    if (!g || g->groups != 2 || g->digits.size() != 4) return std::nullopt;
    return g;
}

std::optional<Decimal> parse_amount(const Seq& s, size_t k, bool allow_scale_suffix) {
    Decimal d;
    size_t p = k;
    bool neg = false;
    auto c = parse_cardinal(s, k, true);
    if (c) {
        p = c->end;
        neg = c->negative;
    } else {
        if (s.at(p) == "minus" || s.at(p) == "negative") { neg = true; ++p; }
        if (s.at(p) != "point") return std::nullopt;
    }
    if (s.at(p) == "point" && !s.hyph(p)) {
        std::string frac;
        size_t q = p + 1;
        while (q < s.size() && !s.hyph(q)) {
            int v = digit_word(s.at(q));
            if (v < 0) break;
            frac += static_cast<char>('0' + v);
            ++q;
        }
        if (!frac.empty()) {
            d.has_point = true;
            d.text = (neg ? "-" : "") + (c ? std::to_string(c->value) : std::string()) + "." + frac;
            d.end = q;
            d.words = q - k;
            if (allow_scale_suffix && !s.hyph(q)) {
                uint64_t sc = scale_value(s.at(q));
                if (sc != 0 && sc != 100000ULL && sc != 10000000ULL) {
                    d.scale_word = std::string((*s.run)[q].orig);
                    d.end = q + 1;
                    d.words = d.end - k;
                }
            }
            return d;
        }
    }
    if (!c) return std::nullopt;
    if (allow_scale_suffix && c->head_form) {
        d.text = (neg ? "-" : "") + std::to_string(c->head);
        d.scale_word = std::string((*s.run)[c->scale_pos].orig);
    } else {
        d.text = c->digits();
    }
    d.is_one = c->value == 1 && !neg;
    d.end = c->end;
    d.words = c->end - k;
    return d;
}

} // namespace qasr::itn::en
