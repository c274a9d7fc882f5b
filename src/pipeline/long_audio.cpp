// Split points by the official rule: moving sum of |x| over 1600-sample windows in [cut − 5 s, cut + 5 s], first
// minimum window, then the first minimum-|x| sample inside it; clamped to [start + 1, end].
#include "pipeline/long_audio.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

size_t quietest_point(const std::vector<float>& x, size_t lo, size_t hi, size_t win) {
    double sum = 0;
    for (size_t i = lo; i < lo + win; ++i) sum += std::fabs(x[i]);
    double best = sum;
    size_t best_at = lo;
    for (size_t i = lo + 1; i + win <= hi; ++i) {
        sum += std::fabs(x[i + win - 1]) - std::fabs(x[i - 1]);
        if (sum < best - 1e-12) {
            best = sum;
            best_at = i;
        }
    }
    size_t at = best_at;
    float m = std::fabs(x[best_at]);
    for (size_t i = best_at; i < best_at + win; ++i)
        if (std::fabs(x[i]) < m) {
            m = std::fabs(x[i]);
            at = i;
        }
    return at;
}

std::vector<std::pair<size_t, size_t>> split_long_audio(const std::vector<float>& x, double limit_seconds, int sr) {
    std::vector<std::pair<size_t, size_t>> out;
    const size_t n = x.size(), limit = size_t(limit_seconds * sr), search = size_t(5 * sr), win = size_t(sr / 10);
    size_t start = 0;
    while (n - start > limit) {
        const size_t cut = start + limit;
        const size_t lo = std::max(start, cut > search ? cut - search : 0), hi = std::min(n, cut + search);
        const size_t boundary = hi - lo > win ? quietest_point(x, lo, hi, win) : cut;
        const size_t b = std::clamp(boundary, start + 1, n);
        out.emplace_back(start, b);
        start = b;
    }
    if (start < n || out.empty()) out.emplace_back(start, n);
    return out;
}

std::string merge_languages(const std::vector<std::string>& langs) {
    std::string out, last;
    for (const auto& l : langs) {
        if (l.empty() || l == last) continue;
        if (!out.empty()) out += ",";
        out += l;
        last = l;
    }
    return out;
}

} // namespace qasr
