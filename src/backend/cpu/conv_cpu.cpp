// 3×3 stride-2 convolution as im2col + matrix product (the conv stem of the audio encoder).
#include "ops/ops.hpp"

#include <memory>
#include <vector>

namespace qasr::ops {

void conv3x3_s2(const float* in, int64_t Cin, int64_t H, int64_t W, const float* w, const float* bias, int64_t Cout,
                float* out) {
    const int64_t Ho = (H + 1) / 2, Wo = (W + 1) / 2, P = Ho * Wo, K = Cin * 9;
    // scratch buffers are fully overwritten: left uninitialized (zero-filling them cost ~5% of the encoder)
    std::unique_ptr<float[]> cols_buf(new float[size_t(P * K)]); // [P, Cin*9], OIHW's inner order (i, kh, kw)
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
    std::unique_ptr<float[]> tmp(new float[size_t(P * Cout)]); // [P, Cout]
    linear(cols, P, K, w, Cout, bias, tmp.get());
    for (int64_t o = 0; o < Cout; ++o)
        for (int64_t p = 0; p < P; ++p) out[o * P + p] = tmp[size_t(p * Cout + o)];
}

} // namespace qasr::ops
