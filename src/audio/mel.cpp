// STFT + mel + log compression in double precision (the reference runs fp32; double keeps our side exact so the
// difference is the reference's own rounding). Mixed-radix FFT for n = 400.
#include "audio/mel.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

double hz_to_mel_slaney(double f) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = std::log(6.4) / 27.0;
    return f < min_log_hz ? f / f_sp : min_log_mel + std::log(f / min_log_hz) / logstep;
}

double mel_to_hz_slaney(double m) {
    const double f_sp = 200.0 / 3.0, min_log_hz = 1000.0, min_log_mel = min_log_hz / f_sp,
                 logstep = std::log(6.4) / 27.0;
    return m < min_log_mel ? f_sp * m : min_log_hz * std::exp(logstep * (m - min_log_mel));
}

MelFrontend::MelFrontend(int n_mels) : n_mels_(n_mels) {
    if (n_mels < 1 || n_mels > 1024) fail("mel", "bad mel bin count " + std::to_string(n_mels));
    window_.resize(kNfft);
    for (int n = 0; n < kNfft; ++n) window_[size_t(n)] = 0.5 - 0.5 * std::cos(2.0 * M_PI * n / kNfft);
    // Filterbank: n_mels + 2 points equally spaced on the Slaney mel scale over [0, 8000] Hz.
    const double mel_max = hz_to_mel_slaney(8000.0);
    std::vector<double> f(size_t(n_mels) + 2);
    for (size_t i = 0; i < f.size(); ++i) f[i] = mel_to_hz_slaney(mel_max * double(i) / double(n_mels + 1));
    filters_.resize(size_t(n_mels));
    first_bin_.resize(size_t(n_mels));
    for (int m = 0; m < n_mels; ++m) {
        const double lo = f[size_t(m)], mid = f[size_t(m) + 1], hi = f[size_t(m) + 2];
        const double enorm = 2.0 / (hi - lo);
        std::vector<double> w(kBins);
        int first = -1, last = -1;
        for (int k = 0; k < kBins; ++k) {
            const double fk = 8000.0 * k / (kBins - 1);
            const double v = std::max(0.0, std::min((fk - lo) / (mid - lo), (hi - fk) / (hi - mid))) * enorm;
            w[size_t(k)] = v;
            if (v > 0) {
                if (first < 0) first = k;
                last = k;
            }
        }
        if (first < 0) first = last = 0;
        first_bin_[size_t(m)] = first;
        filters_[size_t(m)].assign(w.begin() + first, w.begin() + last + 1);
    }
    twiddle_.resize(kNfft);
    for (int k = 0; k < kNfft; ++k) twiddle_[size_t(k)] = std::polar(1.0, -2.0 * M_PI * k / kNfft);
    factors_ = {4, 4, 5, 5};
}

void MelFrontend::fft(const std::complex<double>* in, std::complex<double>* out, int n, int stride,
                      int factor_idx) const {
    if (n == 1) {
        out[0] = in[0];
        return;
    }
    const int p = factors_[size_t(factor_idx)], m = n / p;
    for (int q = 0; q < p; ++q) fft(in + q * stride, out + q * m, m, stride * p, factor_idx + 1);
    const int tw_step = kNfft / n;
    std::complex<double> tmp[5];
    for (int k = 0; k < m; ++k) {
        for (int q = 0; q < p; ++q) tmp[q] = out[q * m + k];
        for (int r = 0; r < p; ++r) {
            std::complex<double> acc = 0;
            const int idx = k + r * m;
            for (int q = 0; q < p; ++q) acc += tmp[q] * twiddle_[size_t((q * idx % n) * tw_step)];
            out[idx] = acc;
        }
    }
}

Tensor MelFrontend::filterbank_matrix() const {
    Tensor t({kBins, n_mels_});
    for (int m = 0; m < n_mels_; ++m)
        for (size_t j = 0; j < filters_[size_t(m)].size(); ++j)
            t.data[size_t(first_bin_[size_t(m)] + int(j)) * size_t(n_mels_) + size_t(m)] = float(filters_[size_t(m)][j]);
    return t;
}

std::vector<double> MelFrontend::filterbank_f64() const {
    std::vector<double> t(size_t(kBins) * size_t(n_mels_), 0.0);
    for (int m = 0; m < n_mels_; ++m)
        for (size_t j = 0; j < filters_[size_t(m)].size(); ++j)
            t[size_t(first_bin_[size_t(m)] + int(j)) * size_t(n_mels_) + size_t(m)] = filters_[size_t(m)][j];
    return t;
}

std::vector<float> MelFrontend::log10_frames(const std::vector<float>& samples, size_t N, size_t t0, size_t t1) const {
    if (N <= size_t(kNfft / 2)) fail("mel", "audio of " + std::to_string(N) + " samples is too short for the STFT");
    std::vector<float> out(size_t(n_mels_) * (t1 - t0));
    frames_into(samples, N, t0, t1, out.data(), t1 - t0);
    return out;
}

void MelFrontend::frames_into(const std::vector<float>& samples, size_t N, size_t t0, size_t t1, float* out,
                              size_t ld) const {
    auto x = [&](long i) -> double { return i < long(samples.size()) ? samples[size_t(i)] : 0.0; };
#pragma omp parallel if (t1 - t0 >= 64)
    {
        std::vector<std::complex<double>> frame(kNfft), spec(kNfft);
        std::vector<double> power(kBins);
#pragma omp for schedule(static)
        for (size_t t = t0; t < t1; ++t) {
            for (int j = 0; j < kNfft; ++j) {
                long idx = long(t) * kHop + j - kNfft / 2;
                if (idx < 0) idx = -idx;
                if (idx >= long(N)) idx = 2 * (long(N) - 1) - idx;
                frame[size_t(j)] = x(idx) * window_[size_t(j)];
            }
            fft(frame.data(), spec.data(), kNfft, 1, 0);
            for (int k = 0; k < kBins; ++k) power[size_t(k)] = std::norm(spec[size_t(k)]);
            for (int m = 0; m < n_mels_; ++m) {
                const auto& w = filters_[size_t(m)];
                const double* p = power.data() + first_bin_[size_t(m)];
                double acc = 0;
                for (size_t j = 0; j < w.size(); ++j) acc += w[j] * p[j];
                out[size_t(m) * ld + (t - t0)] = float(std::log10(std::max(acc, 1e-10)));
            }
        }
    }
}

Tensor MelFrontend::normalize(const std::vector<float>& logmel, int n_mels, size_t T, float max) {
    Tensor out({n_mels, int64_t(T)});
    const float floor = max - 8.0f;
    for (size_t i = 0; i < logmel.size(); ++i) out.data[i] = (std::max(logmel[i], floor) + 4.0f) / 4.0f;
    return out;
}

Tensor MelFrontend::compute(const std::vector<float>& samples, size_t min_samples,
                            const PassHook* stop) const {
    const size_t N = std::max(samples.size(), min_samples);
    if (N <= size_t(kNfft / 2)) fail("mel", "audio of " + std::to_string(N) + " samples is too short for the STFT");
    const size_t T = n_frames(N), block = 2000; // 20 s of audio between asks of stop
    std::vector<float> logmel(size_t(n_mels_) * T);
    for (size_t t0 = 0; t0 < T; t0 += block) {
        if (t0 && ask(stop, double(t0) / double(T))) return Tensor();
        frames_into(samples, N, t0, std::min(T, t0 + block), logmel.data() + t0, T);
    }
    const float mx = logmel.empty() ? 0.0f : *std::max_element(logmel.begin(), logmel.end());
    return normalize(logmel, n_mels_, T, mx);
}

} // namespace qasr
