// Output parsing as the official toolkit's parse_asr_output, operating on Unicode code points.
#include "text/output.hpp"

#include "core/error.hpp"
#include "text/utf8.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace qasr {
namespace {

std::u32string to32(const std::string& s) {
    auto v = utf8::decode(utf8::sanitize(s));
    return std::u32string(v.begin(), v.end());
}
std::string to8(const std::u32string& s) { return utf8::encode(std::vector<char32_t>(s.begin(), s.end())); }

} // namespace

bool is_unicode_space(char32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x1F || c == 0x85 ||
           c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

std::string strip_space(const std::string& s) {
    std::u32string u = to32(s);
    size_t b = 0, e = u.size();
    while (b < e && is_unicode_space(u[b])) ++b;
    while (e > b && is_unicode_space(u[e - 1])) --e;
    return to8(u.substr(b, e - b));
}

namespace {

std::string strip(const std::string& s) { return strip_space(s); }

std::string ascii_lower(std::string s) {
    for (char& c : s) c = char(std::tolower(uint8_t(c)));
    return s;
}

std::u32string fix_patterns(const std::u32string& s, size_t thr) {
    const size_t n = s.size(), min_len = 2 * thr;
    if (n < min_len) return s;
    std::u32string out;
    size_t i = 0;
    while (i + min_len <= n) {
        for (size_t k = 1; k <= thr && i + k * thr <= n; ++k) {
            const std::u32string_view pat(s.data() + i, k);
            size_t reps = 1;
            while (i + (reps + 1) * k <= n && std::u32string_view(s.data() + i + reps * k, k) == pat) ++reps;
            if (reps >= thr) {
                out.append(pat);
                return out + fix_patterns(s.substr(i + reps * k), thr);
            }
        }
        out += s[i++];
    }
    return out + s.substr(i);
}

} // namespace

std::string fix_repetitions(const std::string& text, size_t thr) {
    const std::u32string u = to32(text);
    std::u32string runs;
    for (size_t i = 0; i < u.size();) {
        size_t j = i;
        while (j < u.size() && u[j] == u[i]) ++j;
        if (j - i > thr) runs += u[i];
        else runs.append(u, i, j - i);
        i = j;
    }
    return to8(fix_patterns(runs, thr));
}

ParsedOutput parse_asr_output(const std::string& raw, const std::string& forced_language) {
    ParsedOutput r;
    std::string s = strip(raw);
    if (s.empty()) return r;
    s = fix_repetitions(s);
    if (!forced_language.empty()) {
        r.language = forced_language;
        r.text = s;
        return r;
    }
    const std::string tag = "<asr_text>";
    const size_t at = s.find(tag);
    if (at == std::string::npos) {
        r.text = strip(s);
        return r;
    }
    const std::string meta = s.substr(0, at), text = s.substr(at + tag.size());
    if (ascii_lower(meta).find("language none") != std::string::npos) {
        r.text = strip(text);
        return r;
    }
    size_t pos = 0;
    while (pos <= meta.size()) {
        size_t nl = meta.find('\n', pos);
        if (nl == std::string::npos) nl = meta.size();
        const std::string line = strip(meta.substr(pos, nl - pos));
        pos = nl + 1;
        if (line.empty()) continue;
        if (ascii_lower(line).rfind("language ", 0) == 0) {
            std::u32string lang = to32(strip(line.substr(9)));
            if (!lang.empty()) {
                for (auto& c : lang) c = char32_t(c < 128 ? std::tolower(int(c)) : int(c));
                if (lang[0] < 128) lang[0] = char32_t(std::toupper(int(lang[0])));
            }
            r.language = to8(lang);
            break;
        }
    }
    r.text = strip(text);
    return r;
}

const std::vector<std::string>& supported_languages() {
    static const std::vector<std::string> langs = {
        "Chinese", "English", "Cantonese", "Arabic",  "German",  "French",  "Spanish", "Portuguese",
        "Indonesian", "Italian", "Korean", "Russian", "Thai",    "Vietnamese", "Japanese", "Turkish",
        "Hindi",   "Malay",   "Dutch",     "Swedish", "Danish",  "Finnish", "Polish",  "Czech",
        "Filipino", "Persian", "Greek",    "Romanian", "Hungarian", "Macedonian"};
    return langs;
}

std::string canonical_language(const std::string& name) {
    static const std::pair<const char*, const char*> iso[] = {
        {"zh", "Chinese"}, {"en", "English"}, {"yue", "Cantonese"}, {"ar", "Arabic"}, {"de", "German"},
        {"fr", "French"},  {"es", "Spanish"}, {"pt", "Portuguese"}, {"id", "Indonesian"}, {"it", "Italian"},
        {"ko", "Korean"},  {"ru", "Russian"}, {"th", "Thai"},       {"vi", "Vietnamese"}, {"ja", "Japanese"},
        {"tr", "Turkish"}, {"hi", "Hindi"},   {"ms", "Malay"},      {"nl", "Dutch"},      {"sv", "Swedish"},
        {"da", "Danish"},  {"fi", "Finnish"}, {"pl", "Polish"},     {"cs", "Czech"},      {"fil", "Filipino"},
        {"fa", "Persian"}, {"el", "Greek"},   {"ro", "Romanian"},   {"hu", "Hungarian"},  {"mk", "Macedonian"}};
    std::string s = ascii_lower(strip(name));
    if (s == "auto") return ""; // detect (whisper.cpp's `-l auto`)
    for (const auto& [code, lang] : iso)
        if (s == code) return lang;
    if (!s.empty()) s[0] = char(std::toupper(uint8_t(s[0])));
    for (const auto& l : supported_languages())
        if (l == s) return l;
    fail("options", "unsupported language '" + name + "' (use a name such as English or an ISO code such as en)");
}

double language_tag_probability(const std::vector<TokenInfo>& tokens, int asr_text) {
    double lp = 0;
    for (const TokenInfo& t : tokens) {
        if (t.id == asr_text) return std::exp(lp);
        lp += t.logprob;
    }
    return 0.0;
}

} // namespace qasr
