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

float quiet_level(const std::vector<float>& x, size_t begin, size_t end) {
    end = std::min(end, x.size());
    float loudest = 0;
    for (size_t i = begin; i < end; i += kFrame) loudest = std::max(loudest, frame_rms(&x[i], std::min(kFrame, end - i)));
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

std::vector<std::pair<size_t, size_t>> split_at_pauses(const std::vector<float>& x, double max_seconds, int sr,
                                                       float level) {
    std::vector<std::pair<size_t, size_t>> out;
    const size_t n = x.size(), limit = std::max<size_t>(2, size_t(max_seconds * sr)), win = size_t(sr / 10);
    if (level < 0) level = quiet_level(x);
    const size_t lead = size_t(sr) / 5;  // of a pause kept before and after speech
    const size_t long_pause = 2 * lead + win;
    const auto quiet = [&](size_t i) { return i < n && frame_rms(&x[i], std::min(kFrame, n - i)) <= level; };
    // the quiet run of 10 ms frames from f (counted up to `cap`: a long silence is not rescanned whole every cut)
    const auto run_end = [&](size_t f, size_t cap) {
        while (f < cap && quiet(f)) f += kFrame;
        return std::min(f, n);
    };
    const auto emit = [&](size_t b, size_t e) {
        if (e > b) out.emplace_back(b, e);
    };
    size_t start = 0;
    while (n - start > limit) {
        const size_t lo = start + limit / 4, hi = start + limit; // a cut lies in [lo, hi)
        // the longest pause (run of quiet frames, at least 100 ms) starting before hi and ending after lo; the last
        // of equals
        size_t ra = 0, rb = 0;
        for (size_t f = start; f < hi;) {
            if (!quiet(f)) {
                f += kFrame;
                continue;
            }
            const size_t e = run_end(f, hi + limit);
            if (e > lo && e - f >= win && e - f >= rb - ra) ra = f, rb = e;
            f = e;
        }
        if (rb - ra >= long_pause) {
            // a long pause: the speech before it ends `lead` into it, and its middle (at most a limit long) is a piece
            // of its own, without speech; the next piece starts `lead` before the speech after it
            const size_t b = ra > start ? ra + lead : start;
            emit(start, b);
            const size_t e = std::min(rb - lead, b + limit);
            emit(b, e);
            start = e;
            continue;
        }
        // a short pause: its middle within [lo, hi), or later so that at most `lead` of it comes before the next
        // piece's speech; no pause: the quietest 100 ms window of [start + limit/2, hi)
        size_t cut = rb > ra ? std::max(std::max(ra, lo) + (std::min(rb, hi) - std::max(ra, lo)) / 2, rb > lead ? rb - lead : 0)
                             : (limit / 2 > win ? quietest_point(x, start + limit / 2, hi, win) : hi);
        cut = std::clamp(cut, start + 1, hi);
        out.emplace_back(start, cut);
        start = cut;
    }
    // the last piece: a long quiet tail (at least long_pause) becomes a piece of its own
    size_t tail = n;
    while (tail > start && quiet(tail - std::min(kFrame, tail - start))) tail -= std::min(kFrame, tail - start);
    if (n - tail >= long_pause && tail > start) {
        emit(start, tail + lead);
        emit(tail + lead, n);
    } else {
        emit(start, n);
    }
    if (out.empty()) out.emplace_back(0, n);
    return out;
}

const char* segment_joiner(const std::string& before, const std::string& next) {
    if (before.empty() || next.empty()) return "";
    const auto a = utf8::decode(utf8::sanitize(before.substr(before.size() - std::min<size_t>(4, before.size()))));
    const auto b = utf8::decode(utf8::sanitize(next.substr(0, std::min<size_t>(4, next.size()))));
    const char32_t l = a.empty() ? ' ' : a.back(), r = b.empty() ? ' ' : b.front();
    return !utf8::written_without_spaces(l) && !utf8::written_without_spaces(r) && !is_space(l) && !is_space(r) ? " " : "";
}

void append_segment_text(std::string& joined, const std::string& next) {
    joined += segment_joiner(joined, next);
    joined += next;
}

} // namespace qasr
