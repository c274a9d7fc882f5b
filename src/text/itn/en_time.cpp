// English ITN time class: "two p m" -> "02:00 p.m.", "eleven o six p m" ->
// "11:06 p.m.", "three o'clock" -> "03:00", "quarter to one" -> "12:45",
// "ten to eleven pm" -> "10:50 p.m.", "seven a m e s t" -> "07:00 a.m. est".
// Without a.m./p.m. an "H MM" reading needs a one-digit hour ("eight forty")
// or a preceding "at"/"by"/"until"; "eleven fifty five" is read as a year.
#include "en_classes.hpp"

namespace qasr::itn::en {

namespace {

int hour_word(std::string_view w) {
    int u = unit_value(w);
    if (u >= 1) return u;
    int t = teen_value(w);
    if (t >= 10 && t <= 12) return t;
    return -1;
}

// Minutes after an hour: "o six" (6), "thirty eight", "fifteen".
std::optional<std::pair<int, size_t>> parse_minutes(const Ctx& c, size_t p) {
    std::string_view w = c.lw(p);
    if (c.hyph(p)) return std::nullopt;
    if (w == "o" || w == "oh") {
        int u = unit_value(c.lw(p + 1));
        if (u >= 1) return std::make_pair(u, p + 2);
        return std::nullopt;
    }
    if (int t = teen_value(w); t >= 0) return std::make_pair(t, p + 1);
    if (int t = tens_value(w); t >= 20 && t <= 50) {
        int u = unit_value(c.lw(p + 1));
        if (u >= 1) return std::make_pair(t + u, p + 2);
        return std::make_pair(t, p + 1);
    }
    return std::nullopt;
}

// "a m", "p m", "am", "pm" -> "a.m."/"p.m." (upper case kept).
std::optional<std::pair<std::string, size_t>> parse_suffix(const Ctx& c, size_t p) {
    std::string_view w = c.lw(p);
    if (c.hyph(p)) return std::nullopt;
    auto fmt = [](std::string_view letter_orig) {
        bool up = letter_orig[0] >= 'A' && letter_orig[0] <= 'Z';
        std::string s;
        s += letter_orig[0];
        s += up ? ".M." : ".m.";
        if (s[0] >= 'A' && s[0] <= 'Z' && !up) s[0] = static_cast<char>(s[0] - 'A' + 'a');
        return s;
    };
    if ((w == "a" || w == "p") && c.lw(p + 1) == "m" && !c.hyph(p + 1)) {
        std::string_view o = c.ow(p);
        std::string s = fmt(o);
        if (c.ow(p + 1)[0] == 'M') { s[2] = 'M'; s[0] = static_cast<char>(s[0] & ~0x20); }
        return std::make_pair(s, p + 2);
    }
    if (w == "am" || w == "pm") {
        std::string_view o = c.ow(p);
        bool up = o[1] == 'M';
        std::string s;
        s += static_cast<char>(up ? (o[0] & ~0x20) : (o[0] | 0x20));
        s += up ? ".M." : ".m.";
        return std::make_pair(s, p + 1);
    }
    return std::nullopt;
}

// Time zone: "gmt", "g m t", "E S T" -> joined, case kept.
std::optional<std::pair<std::string, size_t>> parse_zone(const Ctx& c, size_t p) {
    static constexpr std::string_view kZones[] = {"gmt", "utc", "est", "edt", "cst", "cdt", "mst", "mdt",
                                                  "pst", "pdt", "bst", "cet", "cest", "ist", "jst", "aest"};
    if (c.hyph(p)) return std::nullopt;
    for (auto z : kZones) {
        if (c.lw(p) == z) return std::make_pair(std::string(c.ow(p)), p + 1);
        size_t q = p;
        std::string out;
        bool ok = true;
        for (char ch : z) {
            if (c.lw(q).size() != 1 || c.lw(q)[0] != ch || (q > p && c.hyph(q))) { ok = false; break; }
            out += c.ow(q);
            ++q;
        }
        if (ok) return std::make_pair(out, q);
    }
    return std::nullopt;
}

std::string hhmm(int h, int m) {
    std::string s;
    s += static_cast<char>('0' + h / 10);
    s += static_cast<char>('0' + h % 10);
    s += ':';
    s += static_cast<char>('0' + m / 10);
    s += static_cast<char>('0' + m % 10);
    return s;
}

bool at_context(const Ctx& c, size_t i) {
    if (i == 0) return false;
    std::string_view p = c.lw(i - 1);
    return p == "at" || p == "by" || p == "until" || p == "till" || p == "around" || p == "from";
}

Match finish(const Ctx& c, int h, int m, size_t p, bool need_suffix) {
    Match r;
    r.out = hhmm(h, m);
    auto suf = parse_suffix(c, p);
    if (suf) { r.out += " " + suf->first; p = suf->second; }
    if (auto z = parse_zone(c, p)) { r.out += " " + z->first; p = z->second; }
    (void)need_suffix;
    r.end = p;
    return r;
}

} // namespace

std::optional<Match> match_time(const Ctx& c, size_t i) {
    std::string_view w = c.lw(i);
    // quarter/half past/to H
    if ((w == "quarter" || w == "half") && (c.lw(i + 1) == "past" || c.lw(i + 1) == "to" || c.lw(i + 1) == "till")) {
        int h = hour_word(c.lw(i + 2));
        if (h < 0 || c.hyph(i + 1) || c.hyph(i + 2)) return std::nullopt;
        bool past = c.lw(i + 1) == "past";
        if (w == "half" && !past) return std::nullopt;
        int m = w == "half" ? 30 : 15;
        if (!past) { m = 60 - m; h = h == 1 ? 12 : h - 1; }
        return finish(c, h, m, i + 3, false);
    }
    // M [min|minutes] past/to H
    if (auto mins = parse_cardinal(c.seq(), i, false); mins && mins->value >= 1 && mins->value <= 59) {
        size_t p = mins->end;
        bool minute_word = false;
        std::string_view mw = c.lw(p);
        if (mw == "min" || mw == "mins" || mw == "minute" || mw == "minutes") { minute_word = true; ++p; }
        std::string_view rel = c.lw(p);
        if ((rel == "past" || rel == "to" || rel == "till") && !c.hyph(p)) {
            int h = hour_word(c.lw(p + 1));
            if (h >= 0 && !c.hyph(p + 1)) {
                bool past = rel == "past";
                int m = static_cast<int>(mins->value);
                if (!past) { m = 60 - m; h = h == 1 ? 12 : h - 1; }
                Match r = finish(c, h, m, p + 2, false);
                bool has_suffix = r.out.find(".m.") != std::string::npos || r.out.find(".M.") != std::string::npos;
                if (minute_word || has_suffix || at_context(c, i) || past) return r;
            }
        }
    }
    // "fourteen hundred hours" -> 14:00 (military style)
    if (auto hh = parse_groups(c.seq(), i, 1);
        hh && std::stoi(hh->digits) <= 23 && c.lw(hh->end) == "hundred" && c.lw(hh->end + 1) == "hours" &&
        !c.hyph(hh->end))
        return finish(c, std::stoi(hh->digits), 0, hh->end + 2, false);
    int h = hour_word(w);
    if (h < 0) return std::nullopt;
    size_t p = i + 1;
    std::string_view n = c.lw(p);
    if (!c.hyph(p) && (n == "o'clock" || n == "oclock" || (n == "o" && c.lw(p + 1) == "clock")))
        return finish(c, h, 0, n == "o" ? p + 2 : p + 1, false);
    if (auto suf = parse_suffix(c, p)) return finish(c, h, 0, p, true);
    auto mins = parse_minutes(c, p);
    if (!mins) return std::nullopt;
    auto [m, q] = *mins;
    if (parse_suffix(c, q)) return finish(c, h, m, q, true);
    if (h <= 9 || at_context(c, i)) {
        // Do not read "two thousand", "three hundred" etc. as times.
        std::string_view after = c.lw(q);
        if (after == "hundred" || scale_value(after) != 0) return std::nullopt;
        return finish(c, h, m, q, false);
    }
    return std::nullopt;
}

} // namespace qasr::itn::en
