#include "pipeline/progress.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

void ProgressCalibration::add(const TranscriptionResult& r) {
    if (!(r.audio_seconds > 0) || r.tokens.size() < 2) return;
    const Timings& t = r.timings;
    const double s = r.audio_seconds;
    const ProgressRates now{t.mel_ms / s, t.encode_ms / s, t.prefill_ms / s, t.decode_ms / double(r.tokens.size() - 1)};
    if (!now.known()) return;
    std::lock_guard<std::mutex> lk(mu_);
    if (!r_.known()) {
        r_ = now;
        return;
    }
    const auto mix = [](double& a, double b) { a += 0.3 * (b - a); };
    mix(r_.mel, now.mel), mix(r_.encoder, now.encoder), mix(r_.prefill, now.prefill), mix(r_.step_ms, now.step_ms);
}

ProgressRates ProgressCalibration::get() const {
    std::lock_guard<std::mutex> lk(mu_);
    return r_;
}

PieceProgress::PieceProgress(std::function<void(double)> report, int expected_tokens, double seconds, bool device,
                             const ProgressRates& rates, Clock clock)
    : report_(std::move(report)), clock_(std::move(clock)), expected_(std::max(1, expected_tokens)),
      share_(device ? 0.1 : 0.3) {
    const double per_s = rates.mel + rates.encoder + rates.prefill;
    if (!rates.known() || !(seconds > 0)) return;
    const double prompt = per_s * seconds;
    share_ = std::clamp(prompt / (prompt + double(expected_) * rates.step_ms), 0.02, 0.98);
    span_[0] = rates.mel / per_s, span_[1] = rates.encoder / per_s, span_[2] = rates.prefill / per_s;
}

int PieceProgress::expected_tokens(double seconds) { return 6 + int(std::ceil(4.0 * std::max(0.0, seconds))); }

void PieceProgress::stage(Stage s, double done) {
    const int i = int(s);
    double before = 0;
    for (int k = 0; k < i; ++k) before += span_[k];
    report_(share_ * (before + span_[i] * std::clamp(done, 0.0, 1.0)));
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
