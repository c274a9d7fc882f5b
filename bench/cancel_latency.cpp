// How soon a transcription stops once TranscribeOptions::abort answers true: the gaps between its checks in a whole
// transcription (the worst case is the largest gap), and the measured latency from setting a flag on another
// thread to transcribe() throwing qasr::Cancelled, at fractions of the whole transcription's time.
//   cancel_latency MODEL_DIR AUDIO [cpu|cuda] [runs] [tokens]
// tokens > 0: decode exactly that many tokens (ignore_eos; random-weight checkpoints stop early otherwise).
#include "qasr/qasr.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

using Clock = std::chrono::steady_clock;

static double ms(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: cancel_latency MODEL_DIR AUDIO [cpu|cuda] [runs] [tokens]\n");
        return 2;
    }
    qasr::LoadOptions lo;
    if (argc > 3) lo.device = argv[3];
    const int runs = argc > 4 ? std::max(1, std::atoi(argv[4])) : 3;
    const auto t = qasr::Transcriber::load_with_warmup(argv[1], lo);
    qasr::TranscribeOptions o;
    o.itn = false;
    if (argc > 5 && std::atoi(argv[5]) > 0) o.decode.max_new_tokens = std::atoi(argv[5]), o.decode.ignore_eos = true;
    std::vector<Clock::time_point> checks;
    o.abort = [&] {
        checks.push_back(Clock::now());
        return false;
    };
    const auto t0 = Clock::now();
    const auto full = t.transcribe_file(argv[2], o);
    const auto t1 = Clock::now();
    const double whole = ms(t0, t1);
    const auto& tm = full.timings;
    const double bounds[] = {tm.mel_ms, tm.mel_ms + tm.encode_ms, tm.mel_ms + tm.encode_ms + tm.prefill_ms};
    const char* stage[] = {"log-mel", "encoder", "prefill", "decode"};
    const auto stage_of = [&](double at) { // ms from the start
        int s = 0;
        while (s < 3 && at > bounds[s]) ++s;
        return stage[s];
    };
    double worst = 0, worst_at = 0;
    Clock::time_point prev = t0;
    for (const auto& c : checks) {
        if (ms(prev, c) > worst) worst = ms(prev, c), worst_at = ms(t0, prev);
        prev = c;
    }
    if (ms(prev, t1) > worst) worst = ms(prev, t1), worst_at = ms(t0, prev);
    std::printf("%s, %s, %.2f s audio: %.1f ms whole (mel %.1f, encode %.1f, prefill %.1f, decode %.1f ms, %zu tokens)\n",
                t.model_summary().c_str(), lo.device.c_str(), full.audio_seconds, whole, tm.mel_ms, tm.encode_ms,
                tm.prefill_ms, tm.decode_ms, full.tokens.size());
    std::printf("abort asked %zu times; largest gap between two asks %.2f ms (from %.1f ms, in the %s)\n", checks.size(),
                worst, worst_at, stage_of(worst_at + 0.001));
    std::printf("latency from the flag to qasr::Cancelled (median of %d) at a fraction of the whole time:\n", runs);
    for (const double f : {0.05, 0.25, 0.5, 0.75, 0.95}) {
        std::vector<double> lat;
        for (int r = 0; r < runs; ++r) {
            std::atomic<bool> stop{false};
            qasr::TranscribeOptions oc = o;
            oc.abort = [&] { return stop.load(std::memory_order_relaxed); };
            Clock::time_point set_at{};
            std::thread timer([&] {
                std::this_thread::sleep_for(std::chrono::microseconds(int64_t(f * whole * 1000)));
                set_at = Clock::now();
                stop = true;
            });
            bool cancelled = false;
            Clock::time_point end{};
            try {
                t.transcribe_file(argv[2], oc);
            } catch (const qasr::Cancelled&) {
                cancelled = true;
            }
            end = Clock::now();
            timer.join();
            if (cancelled) lat.push_back(ms(set_at, end));
        }
        std::sort(lat.begin(), lat.end());
        if (lat.empty()) std::printf("  %4.0f %% (%.1f ms, %s): finished before the flag\n", f * 100, f * whole, stage_of(f * whole));
        else std::printf("  %4.0f %% (%.1f ms, %s): %.2f ms (min %.2f, max %.2f)\n", f * 100, f * whole, stage_of(f * whole),
                         lat[lat.size() / 2], lat.front(), lat.back());
    }
    return 0;
}
