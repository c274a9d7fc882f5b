// File loading front door: reads the file, picks the WAV parser or FFmpeg, then resamples (libsoxr) and
// conditions the range. Errors name the file and say what it is not.
#include "audio/audio.hpp"
#include "core/error.hpp"

#include <soxr.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

namespace qasr {

std::vector<float> resample(std::vector<float> in, int from_rate, int to_rate) {
    if (from_rate == to_rate || in.empty()) return in;
    const double ratio = double(to_rate) / double(from_rate);
    std::vector<float> out(size_t(std::ceil(double(in.size()) * ratio)) + 16);
    size_t odone = 0;
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_error_t err = soxr_oneshot(from_rate, to_rate, 1, in.data(), in.size(), nullptr, out.data(), out.size(),
                                    &odone, &io, &q, nullptr);
    if (err) fail("audio", std::string("resampling failed: ") + err);
    out.resize(odone);
    return out;
}

void check_finite(const float* x, size_t n, const std::string& what) {
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(x[i]))
            fail("audio", what + ": sample " + std::to_string(i) + " is " + (std::isnan(x[i]) ? "NaN" : "infinite") +
                              " (a float file with non-numbers)");
}

void condition_range(std::vector<float>& x) {
    float peak = 0;
    for (float v : x) peak = std::max(peak, std::fabs(v));
    if (peak > 1.0f)
        for (float& v : x) v /= peak;
    for (float& v : x) v = std::min(1.0f, std::max(-1.0f, v));
}

std::string seconds_text(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
}

std::vector<float> load_audio_bytes(const uint8_t* data, size_t size, const std::string& what, double max_seconds) {
    if (size == 0) fail("audio", what + ": empty file");
    DecodedAudio a;
    if (looks_like_wav(data, size)) {
        a = parse_wav(data, size, what);
    } else { // FFmpeg's module (or, in a build without FFmpeg, the error that says so)
        a = decode_with_ffmpeg(data, size, what, max_seconds);
    }
    if (max_seconds > 0 && a.sample_rate > 0 && double(a.samples.size()) > max_seconds * double(a.sample_rate))
        throw TooLong("audio", what + ": longer than the limit of " + seconds_text(max_seconds));
    check_finite(a.samples.data(), a.samples.size(), what);
    std::vector<float> out = resample(std::move(a.samples), a.sample_rate, kSampleRate);
    condition_range(out);
    return out;
}

std::vector<float> load_audio_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("audio", path + ": cannot open");
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return load_audio_bytes(bytes.data(), bytes.size(), path);
}

} // namespace qasr
