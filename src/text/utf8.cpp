// UTF-8 validation and conversion (RFC 3629: no surrogates, no overlongs, max U+10FFFF).
#include "text/utf8.hpp"

namespace qasr::utf8 {
namespace {

// Length of the valid sequence at s[i..], or 0 with `consumed` set to the maximal invalid subpart length.
size_t valid_seq(std::string_view s, size_t i, size_t& consumed) {
    const auto b = [&](size_t k) { return uint8_t(s[i + k]); };
    const uint8_t c = b(0);
    if (c < 0x80) return 1;
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        consumed = 1;
        return 0;
    }
    for (size_t k = 1; k <= need; ++k) {
        if (i + k >= s.size()) {
            consumed = k;
            return 0;
        }
        const uint8_t x = b(k);
        const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
        if (x < l || x > h) {
            consumed = k;
            return 0;
        }
    }
    return need + 1;
}

} // namespace

std::string sanitize(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        size_t bad = 0;
        const size_t n = valid_seq(s, i, bad);
        if (n) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out += "\xEF\xBF\xBD";
            i += bad;
        }
    }
    return out;
}

std::vector<char32_t> decode(std::string_view s) {
    std::vector<char32_t> out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const uint8_t c = uint8_t(s[i]);
        char32_t cp;
        size_t n;
        if (c < 0x80) cp = c, n = 1;
        else if (c < 0xE0) cp = c & 0x1F, n = 2;
        else if (c < 0xF0) cp = c & 0x0F, n = 3;
        else cp = c & 0x07, n = 4;
        for (size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3F);
        out.push_back(cp);
        i += n;
    }
    return out;
}

std::string encode(char32_t cp) {
    std::string o;
    if (cp < 0x80) o += char(cp);
    else if (cp < 0x800) {
        o += char(0xC0 | (cp >> 6));
        o += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o += char(0xE0 | (cp >> 12));
        o += char(0x80 | ((cp >> 6) & 0x3F));
        o += char(0x80 | (cp & 0x3F));
    } else {
        o += char(0xF0 | (cp >> 18));
        o += char(0x80 | ((cp >> 12) & 0x3F));
        o += char(0x80 | ((cp >> 6) & 0x3F));
        o += char(0x80 | (cp & 0x3F));
    }
    return o;
}

std::string encode(const std::vector<char32_t>& cps) {
    std::string o;
    for (char32_t c : cps) o += encode(c);
    return o;
}

size_t incomplete_tail(std::string_view s) {
    // Look back at most 3 bytes for a lead byte whose sequence is cut off by the end of the buffer.
    for (size_t back = 1; back <= 3 && back <= s.size(); ++back) {
        const uint8_t c = uint8_t(s[s.size() - back]);
        if ((c & 0xC0) == 0x80) continue; // continuation byte: keep looking
        size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
        if (need > back) {
            size_t bad = 0;
            std::string probe(s.substr(s.size() - back));
            // still a valid prefix? (valid_seq reports the cut as consumed == back)
            valid_seq(probe, 0, bad);
            return bad == back ? back : 0;
        }
        return 0;
    }
    return 0;
}

bool written_without_spaces(char32_t c) {
    return (c >= 0x2E80 && c <= 0x9FFF) ||   // CJK radicals, punctuation, kana, CJK unified ideographs
           (c >= 0xF900 && c <= 0xFAFF) ||   // CJK compatibility ideographs
           (c >= 0xFF00 && c <= 0xFFEF) ||   // full-width and half-width forms
           (c >= 0x20000 && c <= 0x3FFFF) || // CJK extensions B and beyond
           (c >= 0x0E00 && c <= 0x0EFF) ||   // Thai, Lao
           (c >= 0x1780 && c <= 0x17FF) ||   // Khmer
           (c >= 0x1000 && c <= 0x109F);     // Myanmar
}

int display_width(char32_t c) {
    return (c >= 0x2E80 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFF00 && c <= 0xFF60) ||
                   (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0x20000 && c <= 0x3FFFF)
               ? 2
               : 1;
}

size_t fitting_tail(std::string_view s, int columns) {
    size_t at = s.size();
    int used = 0;
    while (at > 0) {
        size_t start = at - 1; // the previous code point's lead byte
        while (start > 0 && (uint8_t(s[start]) & 0xC0) == 0x80) --start;
        const auto cps = decode(s.substr(start, at - start));
        const int w = cps.empty() ? 1 : display_width(cps[0]);
        if (used + w > columns) break;
        used += w;
        at = start;
    }
    return at;
}

} // namespace qasr::utf8
