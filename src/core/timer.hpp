// Wall-clock stopwatch used for the timings in TranscriptionResult.
#pragma once
#include <chrono>

namespace qasr {

class Stopwatch {
public:
    Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
    double ms() const {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0_).count();
    }
    void reset() { t0_ = std::chrono::steady_clock::now(); }

private:
    std::chrono::steady_clock::time_point t0_;
};

} // namespace qasr
