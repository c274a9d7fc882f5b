// WeightMatrix helpers and ops::linear on WeightMatrix: matrix-vector products (decode, M = 1) run the fused
// per-ISA kernels over row blocks on all threads; matrix-matrix products (prefill, encoder) expand tiles of W to
// float32 in a scratch buffer and hand them to sgemm (OpenBLAS) or the portable kernel.
#include "backend/cpu/kernels.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "ops/weight.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#ifdef QASR_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace qasr {

size_t WeightMatrix::bytes() const {
    const size_t n = size_t(rows) * size_t(cols);
    switch (fmt) {
    case WFormat::F32: return n * 4;
    case WFormat::BF16: return n * 2;
    case WFormat::Q: return n * size_t(bits) / 8 + 2 * 2 * n / size_t(group_size);
    }
    return 0;
}

const char* WeightMatrix::format_name() const {
    switch (fmt) {
    case WFormat::F32: return "f32";
    case WFormat::BF16: return "bf16";
    case WFormat::Q: return bits == 4 ? "q4" : bits == 6 ? "q6" : bits == 8 ? "q8" : "q";
    }
    return "?";
}

void WeightMatrix::row_f32(int64_t r, float* out) const {
    if (r < 0 || r >= rows) fail("weights", "row " + std::to_string(r) + " outside [0, " + std::to_string(rows) + ")");
    const auto& k = cpu::portable_kernels();
    switch (fmt) {
    case WFormat::F32: std::memcpy(out, static_cast<const float*>(data) + r * cols, size_t(cols) * 4); break;
    case WFormat::BF16: k.bf16_to_f32(static_cast<const uint16_t*>(data) + r * cols, out, size_t(cols)); break;
    case WFormat::Q:
        k.q_dequant(static_cast<const uint8_t*>(data), scales, biases, cols, bits, group_size, out, r, r + 1);
        break;
    }
}

std::vector<float> WeightMatrix::to_f32() const {
    std::vector<float> v(size_t(rows) * size_t(cols));
    for (int64_t r = 0; r < rows; ++r) row_f32(r, v.data() + r * cols);
    return v;
}

WeightMatrix WeightMatrix::from_f32(std::vector<float> values, int64_t r, int64_t c) {
    if (values.size() != size_t(r) * size_t(c)) fail("weights", "from_f32: size does not match the shape");
    auto store = std::make_shared<std::vector<float>>(std::move(values));
    WeightMatrix w;
    w.fmt = WFormat::F32;
    w.rows = r;
    w.cols = c;
    w.data = store->data();
    w.owner = store;
    return w;
}

WeightMatrix WeightMatrix::from_tensor(Tensor t) {
    if (t.shape.size() != 2) fail("weights", "a weight matrix must be 2-D, got " + shape_str(t.shape));
    const int64_t r = t.shape[0], c = t.shape[1];
    return from_f32(std::move(t.data), r, c);
}

namespace ops {
namespace {

// Runs fn(r0, r1) over row blocks of [0, N) on the OpenMP team (one block per thread, 16-row aligned).
template <typename F> void parallel_rows(int64_t N, int64_t work_per_row, F fn) {
    int nt = num_threads();
    if (int64_t(N) * work_per_row < 32768) nt = 1;
    if (nt <= 1) return fn(int64_t(0), N);
    const int64_t per = ((N + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel num_threads(nt)
    {
        const int64_t r0 = std::min(N, int64_t(omp_get_thread_num()) * per), r1 = std::min(N, r0 + per);
        if (r0 < r1) fn(r0, r1);
    }
}

void gemv(const float* x, const WeightMatrix& W, float* y) {
    const cpu::KernelTable& k = cpu::kernels();
    const int64_t N = W.rows, K = W.cols;
    switch (W.fmt) {
    case WFormat::F32: {
        const float* w = static_cast<const float*>(W.data);
        parallel_rows(N, K, [&](int64_t r0, int64_t r1) { k.f32_gemv(w, K, x, y, r0, r1); });
        break;
    }
    case WFormat::BF16: {
        const uint16_t* w = static_cast<const uint16_t*>(W.data);
        parallel_rows(N, K, [&](int64_t r0, int64_t r1) { k.bf16_gemv(w, K, x, y, r0, r1); });
        break;
    }
    case WFormat::Q: {
        thread_local std::vector<float> xp, xs;
        xp.resize(size_t(K));
        xs.resize(size_t(K / W.group_size));
        k.q_prep(x, K, W.bits, W.group_size, xp.data(), xs.data());
        const uint8_t* w = static_cast<const uint8_t*>(W.data);
        const float *pxp = xp.data(), *pxs = xs.data();
        parallel_rows(N, K, [&](int64_t r0, int64_t r1) {
            k.q_gemv(w, W.scales, W.biases, K, W.bits, W.group_size, pxp, pxs, y, r0, r1);
        });
        break;
    }
    }
}

// Rows [r0, r1) of W as float32 into out (parallel over rows).
void expand_rows(const WeightMatrix& W, int64_t r0, int64_t r1, float* out) {
    const cpu::KernelTable& k = cpu::kernels();
    const int64_t K = W.cols;
    parallel_rows(r1 - r0, K, [&](int64_t a, int64_t b) {
        if (W.fmt == WFormat::BF16)
            k.bf16_to_f32(static_cast<const uint16_t*>(W.data) + (r0 + a) * K, out + a * K, size_t((b - a) * K));
        else
            k.q_dequant(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits, W.group_size, out + a * K,
                        r0 + a, r0 + b);
    });
}

// y[:, n0:n0+nb] (row stride N) = x · T[nb, K]ᵀ
void gemm_tile(const float* x, int64_t M, int64_t K, const float* T, int64_t nb, float* y, int64_t N) {
#ifdef QASR_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(nb), int(K), 1.0f, x, int(K), T, int(K), 0.0f, y,
                int(N));
#else
    thread_local std::vector<float> tmp;
    tmp.resize(size_t(M * nb));
    linear_portable(x, M, K, T, nb, tmp.data());
    for (int64_t m = 0; m < M; ++m) std::memcpy(y + m * N, tmp.data() + m * nb, size_t(nb) * 4);
#endif
}

} // namespace

void linear(const float* x, int64_t M, const WeightMatrix& W, const float* bias, float* y) {
    if (M <= 0 || W.rows <= 0) return;
    const int64_t N = W.rows, K = W.cols;
    if (W.fmt == WFormat::F32) {
        if (M == 1) gemv(x, W, y);
        else linear(x, M, K, static_cast<const float*>(W.data), N, nullptr, y);
    } else if (M == 1) {
        gemv(x, W, y);
    } else {
        // Tiles of ~2 MB of float32 rows (a multiple of 16 rows), reused across all M rows of x.
        const int64_t nb = std::max<int64_t>(16, std::min<int64_t>(N, (int64_t(1) << 19) / K / 16 * 16));
        thread_local std::vector<float> tile;
        tile.resize(size_t(nb * K));
        for (int64_t n0 = 0; n0 < N; n0 += nb) {
            const int64_t n1 = std::min(N, n0 + nb);
            expand_rows(W, n0, n1, tile.data());
            gemm_tile(x, M, K, tile.data(), n1 - n0, y + n0, N);
        }
    }
    if (bias)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

Tensor linear(const Tensor& x, const WeightMatrix& W, const Tensor* bias) {
    if (x.cols() != W.cols)
        fail("linear", "input width " + std::to_string(x.cols()) + " != weight " + shape_str(W.shape()));
    Tensor y({x.rows(), W.rows});
    linear(x.ptr(), x.rows(), W, bias && !bias->data.empty() ? bias->ptr() : nullptr, y.ptr());
    return y;
}

} // namespace ops
} // namespace qasr
