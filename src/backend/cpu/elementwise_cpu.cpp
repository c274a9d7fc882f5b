// CPU norms and activations (fp32, with double accumulation for the norms' statistics).
#include "ops/ops.hpp"

#include <cmath>

namespace qasr::ops {

void layer_norm(float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps) {
#pragma omp parallel for if (rows > 8)
    for (int64_t r = 0; r < rows; ++r) {
        float* v = x + r * d;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < d; ++i) mean += v[i];
        mean /= double(d);
        for (int64_t i = 0; i < d; ++i) var += (v[i] - mean) * (v[i] - mean);
        var /= double(d);
        const float inv = float(1.0 / std::sqrt(var + double(eps)));
        const float m = float(mean);
        for (int64_t i = 0; i < d; ++i) v[i] = (v[i] - m) * inv * w[i] + b[i];
    }
}

void rms_norm(float* x, int64_t rows, int64_t d, const float* w, float eps) {
#pragma omp parallel for if (rows > 8)
    for (int64_t r = 0; r < rows; ++r) {
        float* v = x + r * d;
        double ss = 0;
        for (int64_t i = 0; i < d; ++i) ss += double(v[i]) * v[i];
        const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
        for (int64_t i = 0; i < d; ++i) v[i] = w[i] * (v[i] * inv);
    }
}

void gelu_erf(float* x, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * float(M_SQRT1_2)));
}

void silu_mul(float* gate, const float* up, size_t n) {
#pragma omp parallel for if (n > 65536)
    for (size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void softmax_row(float* x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void rope(float* x, int64_t n, int64_t heads, int64_t hd, int64_t pos0, const float* inv_freq) {
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < n; ++t) {
        const float p = float(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const float ang = p * inv_freq[i];
            const float c = std::cos(ang), s = std::sin(ang);
            for (int64_t h = 0; h < heads; ++h) {
                float* v = x + (t * heads + h) * hd;
                const float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

} // namespace qasr::ops
