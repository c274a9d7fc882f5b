// Progress estimates for TranscribeOptions::on_progress: a piece's own (PieceProgress), and the call's as its caller
// sees it (ProgressSink).
#pragma once
#include "core/timer.hpp"

#include <functional>

namespace qasr {

// One piece's progress, a fraction in [0, 1). The stages before the decode take a prior share of the piece's time
// (device ? 10 % : 30 %; log-mel, encoder and prefill 5 / 35 / 60 % of it), each told how far it is by its pass's
// hook (core/pass_hook.hpp) and at its end. The decode counts by time: elapsed / (elapsed + the steps still expected
// × the measured time per step). The steps expected: `expected_tokens`; past them the remainder is taken as a tenth
// of the steps so far (the fraction then stays near 0.9 until the end). The values may go back where the prior
// share was wrong: ProgressSink keeps what the caller sees non-decreasing.
class PieceProgress {
public:
    enum class Stage { Mel, Encoder, Prefill };
    using Clock = std::function<double()>; // milliseconds; default: a steady clock from construction
    PieceProgress(std::function<void(double)> report, int expected_tokens, bool device, Clock clock = {});
    void stage(Stage s, double done); // how far stage s is: its pass's fraction, 1 at its end
    void token();                     // a token chosen (the first one is the prefill's)
    // Tokens a transcript of this many seconds is expected to take: 6 for the language tag and its markers + 4 per
    // second (speech runs at 2.5-5 tokens per second in the languages measured; silence takes fewer).
    static int expected_tokens(double seconds);

private:
    double now() const { return clock_ ? clock_() : sw_.ms(); }
    std::function<void(double)> report_;
    Clock clock_;
    Stopwatch sw_;
    int expected_ = 1, tokens_ = 0;
    double share_ = 0.3, first_ms_ = 0; // the prompt's prior share; when the first token came
};

// What a call reports to TranscribeOptions::on_progress: non-decreasing fractions, each at least `step` above the
// one before (0 first), below 1 until done() reports 1 once. Not thread-safe: one thread at a time.
class ProgressSink {
public:
    explicit ProgressSink(std::function<void(float)> f, double step = 0.005) : f_(std::move(f)), step_(step) {}
    explicit operator bool() const { return bool(f_); }
    void report(double fraction);
    void done();

private:
    std::function<void(float)> f_;
    double step_, last_ = -1;
    bool done_ = false;
};

} // namespace qasr
