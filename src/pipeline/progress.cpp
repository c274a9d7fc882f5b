#include "pipeline/progress.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

PieceProgress::PieceProgress(std::function<void(double)> report, int expected_tokens, bool device, Clock clock)
    : report_(std::move(report)), clock_(std::move(clock)), expected_(std::max(1, expected_tokens)),
      share_(device ? 0.1 : 0.3) {}

int PieceProgress::expected_tokens(double seconds) { return 6 + int(std::ceil(4.0 * std::max(0.0, seconds))); }

void PieceProgress::stage(Stage s, double done) {
    static constexpr double begin[] = {0.0, 0.05, 0.40}, span[] = {0.05, 0.35, 0.60};
    const int i = int(s);
    report_(share_ * (begin[i] + span[i] * std::clamp(done, 0.0, 1.0)));
}

void PieceProgress::token() {
    const double t = now();
    if (++tokens_ == 1) {
        first_ms_ = t; // the prefill's token: the steps are timed from here
        return;
    }
    const double per_step = (t - first_ms_) / double(tokens_ - 1);
    const double left = std::max(double(expected_ - tokens_), 0.1 * tokens_ + 1.0);
    const double total = t + left * per_step;
    if (total > 0) report_(t / total);
}

void ProgressSink::report(double fraction) {
    if (!f_ || done_) return;
    fraction = std::min(std::max(fraction, 0.0), 0.999);
    if (last_ >= 0 && fraction < last_ + step_) return;
    last_ = fraction;
    f_(float(fraction));
}

void ProgressSink::done() {
    if (!f_ || done_) return;
    done_ = true;
    f_(1.0f);
}

} // namespace qasr
