// Chinese number parsing (see zh_numbers.hpp). A single left-to-right pass
// validates the numeral grammar: a digit must be followed by a smaller
// multiplier than the previous one in its section, 万 and 亿 appear at most
// once each and in that order of size; anything else is rejected.
#include "zh_numbers.hpp"

namespace qasr::itn::zh {

int digit_of(char32_t c) {
    switch (c) {
    case U'零': case U'〇': return 0;
    case U'一': case U'壹': case U'幺': return 1;
    case U'二': case U'贰': case U'貳': case U'两': case U'兩': return 2;
    case U'三': case U'叁': case U'參': return 3;
    case U'四': case U'肆': return 4;
    case U'五': case U'伍': return 5;
    case U'六': case U'陆': case U'陸': return 6;
    case U'七': case U'柒': return 7;
    case U'八': case U'捌': return 8;
    case U'九': case U'玖': return 9;
    default: return -1;
    }
}

int64_t mult_of(char32_t c) {
    switch (c) {
    case U'十': case U'拾': return 10;
    case U'百': case U'佰': return 100;
    case U'千': case U'仟': return 1000;
    case U'万': case U'萬': return 10000;
    case U'亿': case U'億': return 100000000;
    default: return 0;
    }
}

bool is_numeral(char32_t c) { return digit_of(c) >= 0 || mult_of(c) != 0; }

namespace {
bool is_liang(char32_t c) { return c == U'两' || c == U'兩'; }
}

std::optional<Number> parse_number(const Text& t, size_t i) {
    if (i >= t.size() || !is_numeral(t[i])) return std::nullopt;
    // Maximal run; 两 only when followed by a multiplier.
    size_t e = i;
    while (e < t.size() && is_numeral(t[e])) {
        if (is_liang(t[e]) && !(e + 1 < t.size() && mult_of(t[e + 1]) >= 100)) break;
        ++e;
    }
    if (e == i) return std::nullopt;
    Number n;
    n.begin = i;
    n.end = e;
    bool any_mult = false;
    for (size_t k = i; k < e; ++k) if (mult_of(t[k])) any_mult = true;
    n.has_mult = any_mult;
    if (!any_mult) {
        n.digit_seq = true;
        for (size_t k = i; k < e; ++k) n.digits += static_cast<char>('0' + digit_of(t[k]));
        if (n.digits.size() > 18) return std::nullopt;
        n.value = std::stoull(n.digits);
        return n;
    }
    uint64_t yi = 0, wan = 0, section = 0;
    bool seen_yi = false, seen_wan = false, zero = false;
    int cur = -1;
    int64_t last_small = 100000; // last 十/百/千 in the current section
    int64_t last_big = 0;        // last 万/亿 seen
    bool section_start = true;
    for (size_t k = i; k < e; ++k) {
        char32_t c = t[k];
        int d = digit_of(c);
        if (d == 0) {
            if (cur > 0) return std::nullopt;
            zero = true;
            continue;
        }
        if (d > 0) {
            if (cur != -1) return std::nullopt;
            cur = d;
            continue;
        }
        int64_t m = mult_of(c);
        if (m < 10000) {
            if (m >= last_small) return std::nullopt;
            if (cur == -1) {
                if (m == 10 && (section_start || zero)) cur = 1;
                else return std::nullopt;
            }
            section += static_cast<uint64_t>(cur) * static_cast<uint64_t>(m);
            cur = -1;
            last_small = m;
            zero = false;
            section_start = false;
            continue;
        }
        if (cur != -1) { section += static_cast<uint64_t>(cur); cur = -1; }
        if (section == 0) return std::nullopt;
        if (m == 100000000) {
            if (seen_yi || seen_wan) return std::nullopt;
            yi = section; seen_yi = true;
        } else {
            if (seen_wan) return std::nullopt;
            wan = section; seen_wan = true;
        }
        last_big = m;
        section = 0;
        last_small = 100000;
        zero = false;
        section_start = true;
        (void)last_big;
    }
    if (cur != -1) {
        // Colloquial tail: 一百一 = 110, 一千五 = 1500, 一万五 = 15000 (no 零 before it).
        if (!zero && !section_start && last_small >= 100) section += static_cast<uint64_t>(cur) * static_cast<uint64_t>(last_small / 10);
        else if (!zero && section_start && last_big != 0 && section == 0) section += static_cast<uint64_t>(cur) * static_cast<uint64_t>(last_big / 10);
        else section += static_cast<uint64_t>(cur);
    }
    if (yi > 9999 || wan > 9999) return std::nullopt;
    n.value = yi * 100000000ULL + wan * 10000ULL + section;
    // <head><万|亿> exactly.
    int64_t lastm = mult_of(t[e - 1]);
    if (lastm >= 10000 && section == 0 && cur == -1) {
        if (lastm == 10000 && !seen_yi) { n.unit_form = true; n.head = wan; n.unit_char = t[e - 1]; }
        if (lastm == 100000000) { n.unit_form = true; n.head = yi; n.unit_char = t[e - 1]; }
    }
    return n;
}

std::string parse_digits(const Text& t, size_t i, size_t& end) {
    std::string s;
    size_t k = i;
    while (k < t.size()) {
        int d = digit_of(t[k]);
        if (d < 0 || is_liang(t[k])) break;
        s += static_cast<char>('0' + d);
        ++k;
    }
    end = k;
    return s;
}

std::string with_commas(uint64_t v) {
    std::string s = std::to_string(v);
    std::string out;
    int lead = static_cast<int>(s.size() % 3);
    for (size_t k = 0; k < s.size(); ++k) {
        if (k != 0 && (static_cast<int>(k) - lead) % 3 == 0) out += ',';
        out += s[k];
    }
    return out;
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) out += static_cast<char>(c);
    else if (c < 0x800) { out += static_cast<char>(0xC0 | (c >> 6)); out += static_cast<char>(0x80 | (c & 0x3F)); }
    else if (c < 0x10000) {
        out += static_cast<char>(0xE0 | (c >> 12));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (c >> 18));
        out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (c & 0x3F));
    }
}

std::string cardinal_text(const Number& n, const Text&) {
    if (n.digit_seq) return n.digits;
    std::string s;
    if (n.unit_form) { s = with_commas(n.head); append_utf8(s, n.unit_char); return s; }
    return with_commas(n.value);
}

std::string plain_text(const Number& n, const Text&) {
    if (n.digit_seq) return n.digits;
    std::string s;
    if (n.unit_form) { s = std::to_string(n.head); append_utf8(s, n.unit_char); return s; }
    return std::to_string(n.value);
}

} // namespace qasr::itn::zh
