// CPU matrix products: OpenBLAS sgemm when the build has it, otherwise a cache-blocked OpenMP kernel.
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#ifdef QASR_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int);
#endif

namespace qasr::ops {
namespace {
int g_threads = 0;
}

void set_num_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    g_threads = n;
    omp_set_num_threads(n);
#ifdef QASR_HAVE_OPENBLAS
    openblas_set_num_threads(1); // the OpenMP team splits the work; sgemm runs per tile (see gemm())
#endif
}

int num_threads() { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

void linear_portable(const float* x, int64_t M, int64_t K, const float* W, int64_t N, float* y) {
    // Each output element is a dot product of two contiguous rows; block over rows of W for cache reuse.
    constexpr int64_t NB = 64, MB = 16;
#pragma omp parallel for schedule(dynamic, 1) collapse(2)
    for (int64_t n0 = 0; n0 < N; n0 += NB)
        for (int64_t m0 = 0; m0 < M; m0 += MB) {
            const int64_t n1 = std::min(N, n0 + NB), m1 = std::min(M, m0 + MB);
            for (int64_t m = m0; m < m1; ++m) {
                const float* xr = x + m * K;
                for (int64_t n = n0; n < n1; ++n) {
                    const float* wr = W + n * K;
                    float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                    for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
                    y[m * N + n] = acc;
                }
            }
        }
}

void linear_portable_serial(const float* x, int64_t M, int64_t K, const float* W, int64_t N, float* y) {
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            const float* xr = x + m * K;
            const float* wr = W + n * K;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
            y[m * N + n] = acc;
        }
}

void linear(const float* x, int64_t M, int64_t K, const float* W, int64_t N, const float* bias, float* y) {
    if (M <= 0 || N <= 0) return;
    WeightMatrix w;
    w.fmt = WFormat::F32;
    w.rows = N;
    w.cols = K;
    w.data = W;
    linear(x, M, w, nullptr, y);
    if (bias)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

Tensor linear(const Tensor& x, const Tensor& W, const Tensor* bias) {
    const int64_t K = W.dim(1);
    if (x.cols() != K) fail("linear", "input width " + std::to_string(x.cols()) + " != weight " + shape_str(W.shape));
    Tensor y({x.rows(), W.dim(0)});
    linear(x.ptr(), x.rows(), K, W.ptr(), W.dim(0), bias && !bias->data.empty() ? bias->ptr() : nullptr, y.ptr());
    return y;
}

} // namespace qasr::ops
