// Pause-based splitting for segment timestamps; see segments.hpp.
#include "pipeline/segments.hpp"

#include "pipeline/long_audio.hpp"
#include "text/utf8.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

namespace {

constexpr size_t kFrame = 160; // 10 ms at 16 kHz

float frame_rms(const float* p, size_t len) {
    double s = 0;
    for (size_t i = 0; i < len; ++i) s += double(p[i]) * p[i];
    return len ? float(std::sqrt(s / double(len))) : 0.0f;
}


bool is_space(char32_t c) { return c == ' ' || c == '\t' || c == '\n' || c == 0x3000; }

} // namespace

float quiet_level(const std::vector<float>& x) {
    float loudest = 0;
    for (size_t i = 0; i < x.size(); i += kFrame) loudest = std::max(loudest, frame_rms(&x[i], std::min(kFrame, x.size() - i)));
    return std::max(1e-3f, loudest * 0.017782794f); // -35 dB
}

std::pair<size_t, size_t> speech_extent(const std::vector<float>& x, size_t begin, size_t end, float level) {
    end = std::min(end, x.size());
    size_t first = end, last = begin;
    for (size_t i = begin; i < end; i += kFrame) {
        const size_t len = std::min(kFrame, end - i);
        if (frame_rms(&x[i], len) > level) {
            if (first == end) first = i;
            last = i + len;
        }
    }
    return first == end ? std::pair{begin, begin} : std::pair{first, last};
}

std::vector<std::pair<size_t, size_t>> split_at_pauses(const std::vector<float>& x, double max_seconds, int sr) {
    std::vector<std::pair<size_t, size_t>> out;
    const size_t n = x.size(), limit = std::max<size_t>(2, size_t(max_seconds * sr)), win = size_t(sr / 10);
    const float level = quiet_level(x);
    const size_t lead = size_t(sr) / 5;
    const auto quiet = [&](size_t i) { return i < n && frame_rms(&x[i], std::min(kFrame, n - i)) <= level; };
    size_t start = 0;
    while (n - start > limit) {
        const size_t lo = start + limit / 4, hi = start + limit; // the cut lies in [lo, hi)
        // the longest pause (run of quiet 10 ms frames, counted whole even where it runs past hi) starting before hi
        // and ending after lo, at least 100 ms long; the last of equals
        size_t best_len = 0, best_a = 0, best_b = 0;
        for (size_t f = start; f < hi;) {
            if (!quiet(f)) {
                f += kFrame;
                continue;
            }
            size_t e = f;
            while (quiet(e)) e += kFrame;
            if (e > lo && e - f >= win && e - f >= best_len) best_len = e - f, best_a = std::max(f, lo), best_b = std::min(e, hi);
            f = e;
        }
        // its middle within [lo, hi), or later so that at most 200 ms of it lead into the next piece; no pause: the
        // quietest 100 ms window of [start + limit/2, hi)
        size_t cut = best_len ? std::max(best_a + (best_b - best_a) / 2, best_b > lead ? best_b - lead : 0)
                              : (limit / 2 > win ? quietest_point(x, start + limit / 2, hi, win) : hi);
        cut = std::clamp(cut, start + 1, hi);
        out.emplace_back(start, cut);
        start = cut;
    }
    if (start < n || out.empty()) out.emplace_back(start, n);
    return out;
}

void append_segment_text(std::string& joined, const std::string& next) {
    if (next.empty()) return;
    if (joined.empty()) {
        joined = next;
        return;
    }
    const auto a = utf8::decode(utf8::sanitize(joined.substr(joined.size() - std::min<size_t>(4, joined.size()))));
    const auto b = utf8::decode(utf8::sanitize(next.substr(0, std::min<size_t>(4, next.size()))));
    const char32_t l = a.empty() ? ' ' : a.back(), r = b.empty() ? ' ' : b.front();
    if (!utf8::written_without_spaces(l) && !utf8::written_without_spaces(r) && !is_space(l) && !is_space(r)) joined += ' ';
    joined += next;
}

} // namespace qasr
