// English ITN digit-string classes: telephone numbers ("plus nine one one two
// three ... " -> "+91 123-123-5678", "seven double nine one two three double
// one three" -> "799-12-3113"), IP-style dotted groups ("two two five dot
// double five dot o dot four o" -> "225.55.0.40"), plain digit strings of
// three or more digits ("seven nine nine" -> 799), and letter/number codes
// ("a b nine" -> ab9, "x eighty six" -> x86, "ten eighty p" -> 1080p).
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

std::string format_phone(const std::string& d) {
    if (d.size() == 10) return d.substr(0, 3) + "-" + d.substr(3, 3) + "-" + d.substr(6);
    if (d.size() == 9) return d.substr(0, 3) + "-" + d.substr(3, 2) + "-" + d.substr(5);
    return d;
}

struct PhoneDigits { std::string digits; size_t end = 0; size_t real_digits = 0; bool only_single = true; };

// Digits read one, two ("fifty six") or "double"/"triple" at a time; at most 20.
std::optional<PhoneDigits> parse_phone_digits(const Ctx& c, size_t k) {
    PhoneDigits d;
    size_t p = k;
    while (p < c.run.size() && d.digits.size() < 20) {
        if (p > k && c.hyph(p) && tens_value(c.lw(p - 1)) < 0) break;
        std::string_view w = c.lw(p);
        int rep = w == "double" ? 2 : w == "triple" ? 3 : 1;
        size_t q = rep > 1 ? p + 1 : p;
        if (int v = digit_word(c.lw(q)); v >= 0) {
            d.digits.append(static_cast<size_t>(rep), static_cast<char>('0' + v));
            if (c.lw(q) != "o" && c.lw(q) != "oh") d.real_digits += static_cast<size_t>(rep);
            p = q + 1;
            continue;
        }
        if (rep > 1) break;
        if (int t = teen_value(w); t >= 10) { d.digits += std::to_string(t); d.real_digits += 2; d.only_single = false; ++p; continue; }
        if (int t = tens_value(w); t >= 20) {
            int u = unit_value(c.lw(p + 1));
            int v = u >= 1 ? t + u : t;
            d.digits += std::to_string(v);
            d.real_digits += 2;
            d.only_single = false;
            p += u >= 1 ? 2 : 1;
            continue;
        }
        break;
    }
    if (d.digits.empty()) return std::nullopt;
    d.end = p;
    return d;
}

// One dotted group: digit string (1-3 digits) or a cardinal <= 255.
std::optional<std::pair<std::string, size_t>> ip_group(const Ctx& c, size_t p) {
    Seq s = c.seq();
    std::optional<std::pair<std::string, size_t>> best;
    if (auto d = parse_digit_string(s, p); d && d->digits.size() <= 3) best = std::make_pair(d->digits, d->end);
    if (auto k = parse_cardinal(s, p, false); k && k->value <= 255 && (!best || k->end > best->second))
        best = std::make_pair(std::to_string(k->value), k->end);
    return best;
}

// Trailing single letters glued to a code: "p" in "1080p", "t i" in "4050ti".
size_t trailing_letters(const Ctx& c, size_t p, std::string& out) {
    size_t start = p;
    while (p < c.run.size() && p < start + 8 && !c.hyph(p) && is_single_letter(c.lw(p)) &&
           (p > start || (c.lw(p) != "a" && c.lw(p) != "i"))) {
        out += c.ow(p);
        ++p;
    }
    return p;
}

} // namespace

std::optional<Match> match_telephone(const Ctx& c, size_t i) {
    // IP-like: g dot g dot g dot g
    if (auto g = ip_group(c, i)) {
        std::string out = g->first;
        size_t p = g->second;
        int groups = 1;
        while (groups < 4 && c.lw(p) == "dot" && !c.hyph(p)) {
            auto n = ip_group(c, p + 1);
            if (!n) break;
            out += "." + n->first;
            p = n->second;
            ++groups;
        }
        if (groups == 4) return Match{p, out};
    }
    // Phone-style digits: single digits, double/triple X, and two-digit numbers
    // ("fifty six"); formats: [+CC] ddd-ddd-dddd, ddd-dd-dddd, card groups.
    size_t p = i;
    bool plus = c.lw(p) == "plus";
    if (plus) ++p;
    auto d = parse_phone_digits(c, p);
    if (!d || d->digits.size() < 3 || d->real_digits < 2) return std::nullopt;
    const std::string& D = d->digits;
    const size_t n = D.size();
    if (n >= 11 && n <= 13) return Match{d->end, (plus ? "+" : "") + D.substr(0, n - 10) + " " + format_phone(D.substr(n - 10))};
    if (plus) return std::nullopt;
    if (n == 10 || n == 9) return Match{d->end, format_phone(D)};
    if (n == 16) return Match{d->end, D.substr(0, 4) + " " + D.substr(4, 4) + " " + D.substr(8, 4) + " " + D.substr(12)};
    if (n == 15) return Match{d->end, D.substr(0, 4) + " " + D.substr(4, 6) + " " + D.substr(10)};
    if (n == 14) return Match{d->end, D.substr(0, 4) + " " + D.substr(4, 6) + " " + D.substr(10)};
    if (!d->only_single) return std::nullopt;
    return Match{d->end, D}; // plain digit string / serial number ("799")
}

std::optional<Match> match_alnum(const Ctx& c, size_t i) {
    Seq s = c.seq();
    std::string out;
    size_t p = i;
    while (p < c.run.size() && p < i + 16 && (p == i || !c.hyph(p)) && is_single_letter(c.lw(p))) {
        out += c.ow(p);
        ++p;
    }
    size_t letters = p - i;
    if (letters == 1 && (c.lw(i) == "a" || c.lw(i) == "i")) return std::nullopt;
    // The number part: longest of digit string, group reading, cardinal.
    std::string num;
    size_t end = p;
    if (p < c.run.size() && (letters == 0 || !c.hyph(p))) {
        if (auto d = parse_digit_string(s, p); d && d->real_digits >= 1 && d->end > end) { num = d->digits; end = d->end; }
        if (auto g = parse_groups(s, p, 4); g && g->end > end) { num = g->digits; end = g->end; }
        if (auto k = parse_cardinal(s, p, false); k && k->end > end) { num = std::to_string(k->value); end = k->end; }
        if (auto k = parse_cardinal(s, p, false); k && k->end == end && !num.empty() && k->words > 1 &&
                                                  (c.lw(k->end - 1) == "hundred" || scale_value(c.lw(k->end - 1))))
            num = std::to_string(k->value);
    }
    if (num.empty()) return std::nullopt;
    out += num;
    size_t after = trailing_letters(c, end, out);
    if (letters == 0) {
        if (after == end) return std::nullopt;   // needs a letter on one side
        if (end - p < 2 && unit_value(c.lw(p)) >= 0) return std::nullopt; // "two p" etc. left to others
    }
    return Match{after, out};
}

} // namespace qasr::itn::en
