// English ITN tokenizer (see en_tokens.hpp). One pass over the bytes, no
// allocation beyond the word list. Words are ASCII letters with internal
// apostrophes ("o'clock"); each keeps its byte span for in-place rewriting.
#include "en_tokens.hpp"

namespace qasr::itn::en {

namespace {

bool is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_blank(unsigned char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }
// Characters that make an adjacent word part of a code/identifier.
bool is_glue(unsigned char c) {
    if (c >= '0' && c <= '9') return true;
    switch (c) {
    case '@': case '_': case '/': case '\\': case '&': case '$': case '%': case '#': case '+':
    case '=': case '*': case '^': case '~': case '<': case '>': case '|': case '`':
        return true;
    default:
        return c >= 0x80;
    }
}

} // namespace

std::vector<Run> tokenize(std::string_view s) {
    std::vector<Run> runs;
    Run cur;
    const size_t n = s.size();
    size_t i = 0;
    // State between words: did we cross only blanks / exactly one hyphen?
    bool joinable = false;  // previous word exists and nothing but blanks since
    bool hyphen = false;
    auto flush = [&] {
        if (!cur.empty()) runs.push_back(std::move(cur));
        cur.clear();
    };
    while (i < n) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (is_alpha(c)) {
            size_t b = i;
            while (i < n) {
                unsigned char d = static_cast<unsigned char>(s[i]);
                if (is_alpha(d)) { ++i; continue; }
                if (d == '\'' && i + 1 < n && is_alpha(static_cast<unsigned char>(s[i + 1])) && i > b) { ++i; continue; }
                break;
            }
            bool glued = (b > 0 && is_glue(static_cast<unsigned char>(s[b - 1]))) ||
                         (i < n && is_glue(static_cast<unsigned char>(s[i])));
            if (glued) { flush(); joinable = false; continue; }
            if (!joinable) flush();
            Word w;
            w.orig = s.substr(b, i - b);
            w.lower.assign(w.orig);
            for (char& ch : w.lower) if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
            w.begin = b;
            w.end = i;
            w.hyphen_before = hyphen && !cur.empty();
            cur.push_back(std::move(w));
            joinable = true;
            hyphen = false;
            continue;
        }
        if (is_blank(c)) {
            if (hyphen) { joinable = false; hyphen = false; } // "twenty - five": not joined
            ++i;
            continue;
        }
        if (c == '-' && joinable && !hyphen && i > 0 && is_alpha(static_cast<unsigned char>(s[i - 1])) &&
            i + 1 < n && is_alpha(static_cast<unsigned char>(s[i + 1]))) {
            hyphen = true;
            ++i;
            continue;
        }
        joinable = false;
        hyphen = false;
        flush();
        ++i;
    }
    flush();
    return runs;
}

} // namespace qasr::itn::en
