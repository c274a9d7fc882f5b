// CPU attention: windowed bidirectional (encoder) and causal over a KV cache (decoder prefill and steps).
// Scores and softmax in float32; parallel over (head, query).
#include "backend/cpu/kernels.hpp"
#include "ops/ops.hpp"

#include <cmath>
#include <vector>

namespace qasr::ops {

void windowed_attention(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t heads,
                        int64_t hd, int64_t window) {
    const int64_t D = heads * hd;
    const float scale = 1.0f / std::sqrt(float(hd));
    const cpu::KernelTable& K = cpu::kernels();
#pragma omp parallel
    {
        std::vector<float> s(static_cast<size_t>(window));
#pragma omp for collapse(2) schedule(static)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t w0 = (i / window) * window, w1 = std::min(n, w0 + window);
                const float* qi = q + i * D + h * hd;
                for (int64_t j = w0; j < w1; ++j) {
                    const float* kj = k + j * D + h * hd;
                    s[size_t(j - w0)] = K.dot(qi, kj, hd) * scale;
                }
                softmax_row(s.data(), w1 - w0);
                float* oi = o + i * D + h * hd;
                for (int64_t c = 0; c < hd; ++c) oi[c] = 0;
                for (int64_t j = w0; j < w1; ++j) {
                    const float p = s[size_t(j - w0)];
                    const float* vj = v + j * D + h * hd;
                    K.axpy(p, vj, oi, hd);
                }
            }
    }
}

void causal_attention(const float* q, const float* kc, const float* vc, float* o, int64_t n, int64_t past,
                      int64_t Hq, int64_t Hkv, int64_t hd) {
    const int64_t group = Hq / Hkv, Dq = Hq * hd, Dk = Hkv * hd, total = past + n;
    const float scale = 1.0f / std::sqrt(float(hd));
    const cpu::KernelTable& K = cpu::kernels();
#pragma omp parallel
    {
        std::vector<float> s(static_cast<size_t>(total));
#pragma omp for collapse(2) schedule(dynamic, 4)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t kvh = h / group, len = past + i + 1;
                const float* qi = q + i * Dq + h * hd;
                for (int64_t j = 0; j < len; ++j) {
                    const float* kj = kc + j * Dk + kvh * hd;
                    s[size_t(j)] = K.dot(qi, kj, hd) * scale;
                }
                softmax_row(s.data(), len);
                float* oi = o + i * Dq + h * hd;
                for (int64_t c = 0; c < hd; ++c) oi[c] = 0;
                for (int64_t j = 0; j < len; ++j) {
                    const float p = s[size_t(j)];
                    const float* vj = vc + j * Dk + kvh * hd;
                    K.axpy(p, vj, oi, hd);
                }
            }
    }
}

} // namespace qasr::ops
