// Segment output formats: SubRip, WebVTT and whisper.cpp-style timestamped lines (qasr/qasr.hpp).
#include "qasr/qasr.hpp"

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

// One line of cue text: line breaks become spaces (a blank line would end the cue), "-->" cannot appear, and WebVTT
// escapes its markup characters.
std::string cue_text(const std::string& t, bool vtt) {
    std::string o;
    for (size_t i = 0; i < t.size(); ++i) {
        const char c = t[i];
        if (c == '\r' || c == '\n') {
            if (!o.empty() && o.back() != ' ') o += ' ';
        } else if (c == '-' && t.compare(i, 3, "-->") == 0) {
            o += "->";
            i += 2;
        } else if (vtt && c == '&') {
            o += "&amp;";
        } else if (vtt && c == '<') {
            o += "&lt;";
        } else if (vtt && c == '>') {
            o += "&gt;";
        } else {
            o += c;
        }
    }
    while (!o.empty() && o.back() == ' ') o.pop_back();
    return o;
}

} // namespace

std::string to_srt(const std::vector<Segment>& segments, int first_index) {
    std::string o;
    int n = first_index - 1;
    for (const auto& s : segments) {
        if (n >= first_index) o += "\n";
        o += std::to_string(++n) + "\n" + timestamp(s.start, ',') + " --> " + timestamp(s.end, ',') + "\n" +
             cue_text(s.text, false) + "\n";
    }
    return o;
}

std::string to_vtt(const std::vector<Segment>& segments, bool header) {
    std::string o = header ? "WEBVTT\n" : "";
    for (const auto& s : segments)
        o += "\n" + timestamp(s.start, '.') + " --> " + timestamp(s.end, '.') + "\n" + cue_text(s.text, true) + "\n";
    return o;
}

std::string to_timestamped_text(const std::vector<Segment>& segments) {
    std::string o;
    for (const auto& s : segments)
        o += "[" + timestamp(s.start, '.') + " --> " + timestamp(s.end, '.') + "]  " + cue_text(s.text, false) + "\n";
    return o;
}

} // namespace qasr
