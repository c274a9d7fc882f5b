// 3×3 stride-2 convolution as im2col + matrix product (the conv stem of the audio encoder).
#include "ops/ops.hpp"

#include <memory>
#include <vector>

namespace qasr::ops {

void conv3x3_s2(const float* in, int64_t Cin, int64_t H, int64_t W, const float* w, const float* bias, int64_t Cout,
                float* out) {
    const int64_t Ho = (H + 1) / 2, Wo = (W + 1) / 2, P = Ho * Wo, K = Cin * 9;
    // the columns are fully overwritten: left uninitialized (zero-filling them cost ~5% of the encoder), and kept per
    // thread between calls (fresh ones cost page faults: 14 MB of columns for the stem's second conv)
    thread_local std::unique_ptr<float[]> cols_buf;
    thread_local size_t cols_cap = 0;
    if (cols_cap < size_t(P * K)) cols_buf.reset(new float[cols_cap = size_t(P * K)]); // [P, Cin*9], OIHW (i, kh, kw)
    float* cols = cols_buf.get();
#pragma omp parallel for if (P * K > 65536)
    for (int64_t y = 0; y < Ho; ++y)
        for (int64_t x = 0; x < Wo; ++x) {
            float* c = cols + (y * Wo + x) * K;
            for (int64_t i = 0; i < Cin; ++i)
                for (int64_t kh = 0; kh < 3; ++kh)
                    for (int64_t kw = 0; kw < 3; ++kw) {
                        const int64_t iy = 2 * y + kh - 1, ix = 2 * x + kw - 1;
                        *c++ = (iy < 0 || iy >= H || ix < 0 || ix >= W) ? 0.0f : in[(i * H + iy) * W + ix];
                    }
        }
    // out[o, p] = Σ_k w[o, k] · cols[p, k]: the kernel weights as the product's rows, the columns as its matrix, so
    // the result comes out channel-major ([Cout, P]) with no transpose pass (each element the same dot product as
    // cols · wᵀ; on the AVX2 kernel the same bits), and the bias added per channel row
    linear(w, Cout, K, cols, P, nullptr, out);
    if (bias) {
#pragma omp parallel for if (P * Cout > 65536)
        for (int64_t o = 0; o < Cout; ++o)
            for (int64_t p = 0; p < P; ++p) out[o * P + p] += bias[o];
    }
}

} // namespace qasr::ops
