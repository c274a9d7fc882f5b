// The progress estimate of TranscribeOptions::on_progress (pipeline/progress.hpp), on a fake clock.
#include "pipeline/progress.hpp"

#include <gtest/gtest.h>

#include <vector>

using qasr::PieceProgress;
using qasr::ProgressSink;

namespace {

struct Recorded {
    std::vector<double> v;
    std::function<void(double)> sink() {
        return [this](double g) { v.push_back(g); };
    }
};

} // namespace

// The stages before the decode fill their prior share (CPU 30 %, device 10 %): log-mel 5 %, encoder 35 %, prefill
// 60 % of it, each as far as its pass tells.
TEST(Progress, StagesFillTheirPriorShare) {
    for (const bool device : {false, true}) {
        Recorded rec;
        PieceProgress p(rec.sink(), 50, device, [] { return 0.0; });
        const double share = device ? 0.1 : 0.3;
        p.stage(PieceProgress::Stage::Mel, 0.5);
        p.stage(PieceProgress::Stage::Mel, 1.0);
        p.stage(PieceProgress::Stage::Encoder, 0.5);
        p.stage(PieceProgress::Stage::Encoder, 1.0);
        p.stage(PieceProgress::Stage::Prefill, 0.25);
        p.stage(PieceProgress::Stage::Prefill, 1.0);
        p.stage(PieceProgress::Stage::Prefill, 7.0); // clamped
        const std::vector<double> want = {0.025, 0.05, 0.225, 0.40, 0.55, 1.0, 1.0};
        ASSERT_EQ(rec.v.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(rec.v[i], share * want[i], 1e-12) << i;
    }
}

// The decode counts by time: elapsed / (elapsed + steps left × measured time per step). The first token (the
// prefill's) only starts the clock of the steps; past the expected count the remainder is a tenth of the steps.
TEST(Progress, DecodeCountsByTimePerStep) {
    Recorded rec;
    double now = 0;
    PieceProgress p(rec.sink(), 21, false, [&] { return now; });
    now = 1000; // the prompt took 1 s
    p.token();
    EXPECT_TRUE(rec.v.empty());
    for (int k = 2; k <= 40; ++k) {
        now += 50; // 50 ms a step
        p.token();
        ASSERT_EQ(rec.v.size(), size_t(k - 1));
        const double left = std::max(21.0 - k, 0.1 * k + 1.0);
        EXPECT_NEAR(rec.v.back(), now / (now + left * 50.0), 1e-12) << k;
    }
    // halfway through the expected steps: 1000 + 10·50 ms done, 10 (of 20) steps left → 1500 / 2000
    EXPECT_NEAR(rec.v[9], 0.75, 1e-12);
    // long past the estimate it stays near 1/1.1 ≈ 0.91 and below 1
    EXPECT_GT(rec.v.back(), 0.85);
    EXPECT_LT(rec.v.back(), 0.95);
    EXPECT_EQ(PieceProgress::expected_tokens(0), 6);
    EXPECT_EQ(PieceProgress::expected_tokens(10), 46);
    EXPECT_EQ(PieceProgress::expected_tokens(2.1), 15);
}

// What the caller sees: 0 first, non-decreasing, at least a step apart, below 1 until done() gives 1 once.
TEST(Progress, SinkIsMonotoneInStepsAndEndsAtOneOnce) {
    std::vector<float> seen;
    ProgressSink s([&](float f) { seen.push_back(f); }, 0.01);
    EXPECT_TRUE(bool(s));
    s.report(0);
    s.report(0.004); // under a step
    s.report(0.2);
    s.report(0.1);   // back: not shown
    s.report(0.205); // under a step above 0.2
    s.report(0.5);
    s.report(1.0);   // 1 is done()'s: shown as 0.999
    s.report(2.0);
    s.done();
    s.done();
    s.report(0.9999);
    const std::vector<float> want = {0.0f, 0.2f, 0.5f, 0.999f, 1.0f};
    EXPECT_EQ(seen, want);
    ProgressSink none(nullptr);
    EXPECT_FALSE(bool(none));
    none.report(0.5); // no callback: nothing to call
    none.done();
}
