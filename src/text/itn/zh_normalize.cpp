// Chinese ITN driver and classes. Decodes the line to code points and scans
// left to right; at each position it tries, in order: fixed expressions
// (copied unchanged), whitelist phrases, era-prefixed dates, 百分之/千分之
// percent, 第 ordinals, 负 negatives, then number-led classes (date, time,
// fraction, decimal, money, measure, cardinal, digit strings). Untouched text
// is copied byte for byte (invalid UTF-8 included).
#include "zh_normalize.hpp"

#include "zh_lexicon.hpp"
#include "zh_numbers.hpp"

#include <optional>

namespace qasr::itn::zh {

namespace {

struct Out { size_t end; std::string text; };

bool is_point(char32_t c) { return c == U'点' || c == U'點'; }

// Decimal or integer amount at p: cardinal-style and plain-style texts.
struct Amount { std::string card, plain; size_t end; size_t chars; uint64_t value; bool decimal; };

std::optional<Amount> parse_amount(const Text& t, size_t p) {
    auto n = parse_number(t, p);
    if (!n) return std::nullopt;
    size_t e = n->end;
    if (e + 1 < t.size() && is_point(t[e]) && digit_of(t[e + 1]) >= 0) {
        size_t fe = 0;
        std::string frac = parse_digits(t, e + 1, fe);
        if (!frac.empty()) {
            uint64_t iv = n->digit_seq ? n->value : n->value;
            Amount a{with_commas(iv) + "." + frac, std::to_string(iv) + "." + frac, fe, fe - p, iv, true};
            if (fe < t.size() && (t[fe] == U'万' || t[fe] == U'萬' || t[fe] == U'亿' || t[fe] == U'億')) {
                append_utf8(a.card, t[fe]);
                append_utf8(a.plain, t[fe]);
                a.end = fe + 1;
            }
            return a;
        }
    }
    if (n->digit_seq && n->digits.size() > 1 && n->digits[0] == '0') return std::nullopt;
    return Amount{cardinal_text(*n, t), plain_text(*n, t), e, n->chars(), n->value, false};
}

std::string two(uint64_t v) { return (v < 10 ? "0" : "") + std::to_string(v); }

bool bare_hour_ok(const Text& t, size_t q) {
    if (q >= t.size()) return true;
    char32_t c = t[q];
    if (c < 0x2E80) return true; // ASCII / Latin / punctuation
    static constexpr std::u32string_view kOk = U"钟整左前后以多了的起到至开出见吧啊呢吗在过才就再去来和与或，。！？、；：还";
    return kOk.find(c) != std::u32string_view::npos;
}

// Time: H点M分[S秒], H点N刻, H点半, bare H点 (see bare_hour_ok).
std::optional<Out> match_time(const Text& t, size_t p) {
    uint64_t h = 0;
    size_t q = 0;
    size_t hour_chars = 0;
    if ((t[p] == U'两' || t[p] == U'兩') && p + 1 < t.size() && is_point(t[p + 1])) { h = 2; q = p + 1; hour_chars = 1; }
    else {
        auto n = parse_number(t, p);
        if (!n || n->value > 24 || (n->digit_seq && n->chars() > 2)) return std::nullopt;
        h = n->value; q = n->end; hour_chars = n->chars();
    }
    if (q >= t.size()) return std::nullopt;
    if (t[q] == U'时' || t[q] == U'時') { // 五时十五分 -> 05:15 (full form only)
        auto m = parse_number(t, q + 1);
        if (!m || m->end >= t.size() || t[m->end] != U'分' || m->value > 59) return std::nullopt;
        if (m->end + 1 < t.size() && t[m->end + 1] == U'钟') return std::nullopt;
        std::string s = two(h) + ":" + two(m->value);
        size_t e = m->end + 1;
        if (auto sec = parse_number(t, e); sec && sec->end < t.size() && t[sec->end] == U'秒' && sec->value <= 59) {
            s += ":" + two(sec->value);
            e = sec->end + 1;
        }
        return Out{e, s};
    }
    if (!is_point(t[q])) return std::nullopt;
    ++q;
    if (auto m = parse_number(t, q); m && m->end < t.size()) {
        char32_t u = t[m->end];
        if (u == U'分' && m->value <= 59 && !(m->end + 1 < t.size() && t[m->end + 1] == U'之')) {
            std::string s = two(h) + ":" + two(m->value);
            size_t e = m->end + 1;
            if (auto sec = parse_number(t, e); sec && sec->end < t.size() && t[sec->end] == U'秒' && sec->value <= 59) {
                s += ":" + two(sec->value);
                e = sec->end + 1;
            }
            return Out{e, s};
        }
        if (u == U'刻' && m->value >= 1 && m->value <= 3)
            return Out{m->end + 1, std::to_string(h) + "点" + std::to_string(m->value) + "刻"};
        return std::nullopt; // decimal, handled elsewhere
    }
    if (q < t.size() && (t[q] == U'半' || t[q] == U'钟'))
        return Out{q + 1, std::to_string(h) + "点" + (t[q] == U'半' ? "半" : "钟")};
    if (hour_chars == 1 && h == 1) return std::nullopt; // 一点 = "a bit"
    if (!bare_hour_ok(t, q)) return std::nullopt;
    return Out{q, std::to_string(h) + "点"};
}

// Date: [YYYY年][M月[D日|号]] with at least one part.
std::optional<Out> match_date(const Text& t, size_t p) {
    std::string s;
    size_t e = p;
    if (auto n = parse_number(t, p); n && n->end < t.size() && t[n->end] == U'年') {
        if (n->digit_seq && n->chars() >= 2 && n->chars() <= 4) s = n->digits;
        else if (n->has_mult && n->chars() >= 2) s = std::to_string(n->value);
        if (!s.empty()) { s += "年"; e = n->end + 1; }
    }
    if (auto m = parse_number(t, e); m && m->end < t.size() && t[m->end] == U'月' && m->value >= 1 &&
                                     m->value <= 12 && (!m->digit_seq || m->chars() == 1)) {
        s += std::to_string(m->value) + "月";
        e = m->end + 1;
        if (auto d = parse_number(t, e); d && d->end < t.size() && (t[d->end] == U'日' || t[d->end] == U'号' ||
                                                                    t[d->end] == U'號') &&
                                         d->value >= 1 && d->value <= 31 && (!d->digit_seq || d->chars() == 1)) {
            s += std::to_string(d->value);
            append_utf8(s, t[d->end]);
            e = d->end + 1;
        }
    }
    if (e == p) return std::nullopt;
    return Out{e, s};
}

// Fraction: A分之B -> B/A; X又A分之B -> X又B/A.
std::optional<Out> match_fraction(const Text& t, size_t p) {
    auto frac_at = [&](size_t q) -> std::optional<Out> {
        auto den = parse_number(t, q);
        if (!den || den->end + 2 >= t.size() || t[den->end] != U'分' || t[den->end + 1] != U'之') return std::nullopt;
        auto num = parse_amount(t, den->end + 2);
        if (!num || den->value == 0) return std::nullopt;
        return Out{num->end, num->plain + "/" + std::to_string(den->value)};
    };
    if (auto f = frac_at(p)) return f;
    if (auto whole = parse_number(t, p); whole && whole->end < t.size() && t[whole->end] == U'又') {
        if (auto f = frac_at(whole->end + 1)) return Out{f->end, std::to_string(whole->value) + "又" + f->text};
    }
    return std::nullopt;
}

// Number-led classes at p (t[p] is a numeral).
std::optional<Out> match_number_led(const Text& t, size_t p) {
    if (t[p] == U'两' || t[p] == U'兩') { // 两 before a unit: 两公斤 -> 2公斤
        std::string_view sym;
        if (size_t n = currency_at(t, p + 1, sym)) return Out{p + 1 + n, std::string(sym) + "2"};
        if (size_t n = unit_at(t, p + 1)) {
            std::string s = "2";
            for (size_t k = p + 1; k < p + 1 + n; ++k) append_utf8(s, t[k]);
            return Out{p + 1 + n, s};
        }
    }
    if (auto r = match_fraction(t, p)) return r;
    if (auto r = match_time(t, p)) return r;
    if (auto r = match_date(t, p)) return r;
    auto a = parse_amount(t, p);
    if (!a) return std::nullopt;
    bool small = a->chars == 1;
    std::string_view sym;
    if (size_t n = currency_at(t, a->end, sym)) {
        if (small && a->value == 1) return std::nullopt;
        return Out{a->end + n, std::string(sym) + a->plain};
    }
    if (size_t n = duration_at(t, a->end); n && !a->decimal) { // 五分钟 -> 5分钟 (一小时 -> 1小时 too)
        std::string s = a->plain;
        for (size_t k = a->end; k < a->end + n; ++k) append_utf8(s, t[k]);
        return Out{a->end + n, s};
    }
    if (size_t n = unit_at(t, a->end)) {
        if (small && a->value == 1) return std::nullopt;
        std::string s = a->card;
        for (size_t k = a->end; k < a->end + n; ++k) append_utf8(s, t[k]);
        return Out{a->end + n, s};
    }
    if (a->decimal) return Out{a->end, a->card};
    auto n = parse_number(t, p);
    // Standalone cardinals below 20 (十, 十一 ... 十九) stay as written, as in NeMo.
    if (n->has_mult && n->chars() >= 2 && n->value >= 20) return Out{a->end, a->card};
    if (n->digit_seq && n->chars() >= 3) return Out{a->end, n->digits};
    return std::nullopt;
}

std::optional<Out> match_at(const Text& t, size_t p) {
    char32_t c = t[p];
    // Era prefix + year.
    for (std::u32string_view era : {std::u32string_view(U"公元前"), std::u32string_view(U"纪元前"),
                                    std::u32string_view(U"紀元前"), std::u32string_view(U"公元后"),
                                    std::u32string_view(U"公元"), std::u32string_view(U"纪元"),
                                    std::u32string_view(U"紀元"), std::u32string_view(U"西元")}) {
        if (starts_with(t, p, era)) {
            if (auto d = match_date(t, p + era.size()); d && d->text.find("年") != std::string::npos) {
                bool before = era.back() == U'前';
                return Out{d->end, std::string(before ? "公元前" : "公元") + d->text};
            }
        }
    }
    if ((starts_with(t, p, U"百分之") || starts_with(t, p, U"千分之"))) {
        bool permille = t[p] == U'千';
        if (starts_with(t, p + 3, U"百")) return Out{p + 4, permille ? "100‰" : "100%"};
        if (auto a = parse_amount(t, p + 3)) return Out{a->end, a->plain + (permille ? "‰" : "%")};
        return std::nullopt;
    }
    if (c == U'第') {
        if (auto n = parse_number(t, p + 1); n && n->chars() >= 2 && !n->digit_seq)
            return Out{n->end, "第" + plain_text(*n, t)};
        return std::nullopt;
    }
    if (c == U'负' || c == U'負') {
        if (auto f = match_fraction(t, p + 1)) return Out{f->end, "-" + f->text};
        if (auto a = parse_amount(t, p + 1)) return Out{a->end, "-" + a->card};
        return std::nullopt;
    }
    if (is_numeral(c)) return match_number_led(t, p);
    return std::nullopt;
}

// Decode UTF-8; invalid bytes become U+FFFD (their bytes are copied as-is).
void decode(std::string_view s, Text& t, std::vector<size_t>& off) {
    size_t i = 0;
    while (i < s.size()) {
        unsigned char b = static_cast<unsigned char>(s[i]);
        char32_t cp = 0xFFFD;
        size_t len = 1;
        if (b < 0x80) { cp = b; }
        else if ((b >> 5) == 6 || (b >> 4) == 14 || (b >> 3) == 30) {
            size_t need = (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
            if (i + need <= s.size()) {
                char32_t v = b & (need == 2 ? 0x1F : need == 3 ? 0x0F : 0x07);
                bool ok = true;
                for (size_t k = 1; k < need; ++k) {
                    unsigned char cb = static_cast<unsigned char>(s[i + k]);
                    if ((cb >> 6) != 2) { ok = false; break; }
                    v = (v << 6) | (cb & 0x3F);
                }
                if (ok) { cp = v; len = need; }
            }
        }
        t.push_back(cp);
        off.push_back(i);
        i += len;
    }
    off.push_back(s.size());
}

} // namespace

std::string normalize_line(std::string_view line) {
    Text t;
    std::vector<size_t> off;
    t.reserve(line.size());
    off.reserve(line.size() + 1);
    decode(line, t, off);
    std::string out;
    out.reserve(line.size() + 8);
    size_t p = 0;
    while (p < t.size()) {
        std::string_view wl;
        size_t n = whitelist_at(t, p, wl);
        if (n) { out += wl; p += n; continue; }
        n = idiom_at(t, p);
        if (n == 2 && t[p] == U'十' && p + 2 < t.size() && (t[p + 2] == U'之' || t[p + 2] == U'钟' || t[p + 2] == U'鐘'))
            n = 0; // 十分之一, 十分钟: not the adverb 十分
        if (n) { out.append(line.substr(off[p], off[p + n] - off[p])); p += n; continue; }
        if (auto m = match_at(t, p)) { out += m->text; p = m->end; continue; }
        // Skip a whole numeral run we did not convert, so we never restart inside it.
        size_t q = p + 1;
        if (is_numeral(t[p])) while (q < t.size() && is_numeral(t[q])) ++q;
        out.append(line.substr(off[p], off[q] - off[p]));
        p = q;
    }
    return out;
}

} // namespace qasr::itn::zh
