// Log-mel front end exactly as the reference feature extractor (spec §3): periodic Hann 400, hop 160, centered
// STFT with reflect padding, last frame dropped, Slaney mel filterbank (built in double), log10 with 1e-10 floor,
// clip-global max−8 clamp, (x+4)/4. Window, filterbank and FFT twiddles are computed once per instance.
#pragma once
#include "core/pass_hook.hpp"
#include "core/tensor.hpp"

#include <complex>
#include <functional>
#include <vector>

namespace qasr {

class MelFrontend {
public:
    static constexpr int kNfft = 400, kHop = 160, kBins = kNfft / 2 + 1;
    explicit MelFrontend(int n_mels);

    // [n_mels, T], T = N/160 after zero-padding to min_samples. Throws when N ≤ 200 after padding. The frames run on
    // the OpenMP team; stop is asked after every 20 s of audio (core/pass_hook.hpp): when it answers true, an empty tensor.
    Tensor compute(const std::vector<float>& samples, size_t min_samples,
                   const PassHook* stop = nullptr) const;
    // Unclamped log10 mel of frames [t0, t1) of a clip of n_total samples (samples past samples.size() are zero),
    // layout [n_mels, t1 - t0]. Streaming recomputes only the frames whose samples changed.
    std::vector<float> log10_frames(const std::vector<float>& samples, size_t n_total, size_t t0, size_t t1) const;
    // Clamp to max − 8 and map (x + 4) / 4; logmel [n_mels, T] → [n_mels, T].
    static Tensor normalize(const std::vector<float>& logmel, int n_mels, size_t T, float max);
    Tensor filterbank_matrix() const; // [201, n_mels], float32 copy of the filterbank (tap 1)
    std::vector<double> filterbank_f64() const; // [201, n_mels] in double (device back ends)
    int n_mels() const { return n_mels_; }
    const std::vector<double>& window() const { return window_; } // [400] periodic Hann (device back ends)
    static size_t n_frames(size_t n_samples) { return n_samples / kHop; }

private:
    // Frames [t0, t1) into out[m·ld + t − t0] (frames independent: any thread split gives the same numbers).
    void frames_into(const std::vector<float>& samples, size_t N, size_t t0, size_t t1, float* out, size_t ld) const;
    void fft(const std::complex<double>* in, std::complex<double>* out, int n, int stride, int factor_idx) const;
    int n_mels_;
    std::vector<double> window_;                  // [400] periodic Hann
    std::vector<std::vector<double>> filters_;    // per mel: weights over [first_bin_, ...)
    std::vector<int> first_bin_;
    std::vector<std::complex<double>> twiddle_;   // exp(-2πi k/400)
    std::vector<int> factors_;                    // 400 = 4·4·5·5
};

// Slaney mel scale (spec §3.4).
double hz_to_mel_slaney(double f);
double mel_to_hz_slaney(double m);

} // namespace qasr
