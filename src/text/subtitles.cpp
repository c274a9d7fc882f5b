// Segment output formats: SubRip, WebVTT and whisper.cpp-style timestamped lines (qasr/qasr.hpp).
#include "qasr/qasr.hpp"
#include "text/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qasr {
namespace {

// HH:MM:SS<sep>mmm, rounded to the millisecond
std::string timestamp(double seconds, char sep) {
    const long long ms = std::llround(std::max(0.0, seconds) * 1000.0);
    char b[48];
    std::snprintf(b, sizeof b, "%02lld:%02lld:%02lld%c%03lld", ms / 3600000, ms / 60000 % 60, ms / 1000 % 60, sep,
                  ms % 1000);
    return b;
}

// One line of cue text: line breaks become spaces (a blank line would end the cue) and "-->" cannot appear.
std::string flatten(const std::string& t) {
    std::string o;
    for (const char c : t) {
        if (c == '\r' || c == '\n') {
            if (!o.empty() && o.back() != ' ') o += ' ';
        } else if (c == '>') { // "-->" → "->", any run of dashes before '>' to one ("--->" gave "-->"; found by fuzzing)
            while (o.size() >= 2 && o.compare(o.size() - 2, 2, "--") == 0) o.pop_back();
            o += '>';
        } else {
            o += c;
        }
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o;
}

// WebVTT's markup characters escaped
std::string escape_vtt(const std::string& t) {
    std::string o;
    for (const char c : t) o += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
    return o;
}

bool no_break_before(char32_t c) { // closing punctuation stays with the character before it
    static const std::u32string closing = U"、。，．！？：；」』）】〉》〕］｝…,.!?:;)]}\"'";
    return closing.find(c) != std::u32string::npos;
}

// Lines of at most `width` columns (CJK and full-width characters count 2): breaks at spaces (the space dropped)
// and between wide characters; a word longer than the width stays whole. width <= 0: one line.
std::string wrap(const std::string& line, int width) {
    if (width <= 0) return line;
    const std::u32string cps = [&] {
        const auto v = utf8::decode(utf8::sanitize(line));
        return std::u32string(v.begin(), v.end());
    }();
    std::string out;
    size_t begin = 0; // the current line: cps[begin, i)
    while (begin < cps.size()) {
        int cols = 0;
        size_t i = begin, last_break = std::u32string::npos; // a break before cps[last_break]
        for (; i < cps.size(); ++i) {
            const char32_t c = cps[i];
            if (i > begin && !no_break_before(c) &&
                (c == ' ' || cps[i - 1] == ' ' || utf8::display_width(c) == 2 || utf8::display_width(cps[i - 1]) == 2))
                last_break = i;
            cols += utf8::display_width(c);
            if (cols > width && last_break != std::u32string::npos) break;
        }
        size_t end = i < cps.size() ? last_break : i;
        size_t trim = end;
        while (trim > begin && cps[trim - 1] == ' ') --trim;
        if (!out.empty()) out += '\n';
        out += utf8::encode(std::vector<char32_t>(cps.begin() + long(begin), cps.begin() + long(trim)));
        begin = end;
        while (begin < cps.size() && cps[begin] == ' ') ++begin;
    }
    return out;
}

} // namespace

std::string to_srt(const std::vector<Segment>& segments, int first_index, int line_width) {
    std::string o;
    int n = first_index - 1;
    for (const auto& s : segments) {
        if (n >= first_index) o += "\n";
        o += std::to_string(++n) + "\n" + timestamp(s.start, ',') + " --> " + timestamp(s.end, ',') + "\n" +
             wrap(flatten(s.text), line_width) + "\n";
    }
    return o;
}

std::string to_vtt(const std::vector<Segment>& segments, bool header, int line_width) {
    std::string o = header ? "WEBVTT\n" : "";
    for (const auto& s : segments)
        o += "\n" + timestamp(s.start, '.') + " --> " + timestamp(s.end, '.') + "\n" + escape_vtt(wrap(flatten(s.text), line_width)) +
             "\n";
    return o;
}

std::string to_timestamped_text(const std::vector<Segment>& segments) {
    std::string o;
    for (const auto& s : segments)
        o += "[" + timestamp(s.start, '.') + " --> " + timestamp(s.end, '.') + "]  " + flatten(s.text) + "\n";
    return o;
}

} // namespace qasr
