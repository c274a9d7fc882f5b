// The encoder's and the prefill's matrix products: C [M, N] (float32) = A [M, K] (bf16) · W [N, K]ᵀ (bf16) + beta·C,
// float32 accumulation. Through cublasLt with, per shape, the operation and layout descriptions and the heuristic's
// algorithm made once and reused: the host queues a product in ~9–10 µs instead of cublasGemmEx's ~10.5–12.8 µs
// (bench/cuda_launch_cost.cu, H200 machine), on the same kernels (cuBLAS's heuristic picks them for both). The
// passes queue 184 products (0.6B, 11 s), and they are host-bound where the host is slow. Pointers not aligned to
// 256 bytes and shapes without a heuristic answer go to cublasGemmEx.
// One algorithm per (N, K) and band of M (M ≤ 32, ≤ 64, ≤ 128, … powers of two): the heuristic's answer for the
// first M of the band, reused (after cublasLtMatmulAlgoCheck) for every other M in it. Asking the heuristic per M
// costs ~0.2 ms, and its answer is often a kernel the process has not run yet, whose first launch costs 2.5–18 ms
// (bench/cuda_first_shape.cu): a request of a length the warm-up had not seen paid both for each of its ~11 shapes
// (first transcription after the warm-up 38.8–53.6 vs 24.7–25.3 ms steady). The warm-up runs a length in every band
// a request up to 30 s uses. The band's algorithm is not always the best for another M of the band (0.6B, 11 s: +0.13
// ms a request), so a pass recorded off the request's path (a product on a stream other than the session's) asks
// the heuristic for its own M first: later requests of that length replay the heuristic's choice, and the first
// launch of a new kernel is paid on the recording thread. The price: the first request of a new length computes its
// products with another algorithm than the later ones — the same tokens in every check, log-probabilities differing
// by up to 5e-3 (0.6B, 8.5 s). QASR_CUDA_GEMM_BANDS=0 asks the heuristic for every M from the start (a transcript
// that never depends on what ran before; the first request of a length then pays as described).
// Not kept (docs/benchmarks.md, Session 15): one algorithm per 32-row band asked at the band's largest M for every
// M of it (history-free, but +0.5 ms a request at 11 s); every M up to 512 asked ahead by worker threads with their
// own handles, each distinct algorithm launched there once (first requests still 38–43 ms, steady state 1 ms slower;
// causes not found).
#pragma once
#include "backend/cuda/check.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace qasr::cuda::detail {

class GemmPlans {
public:
    GemmPlans(cublasHandle_t blas, cudaStream_t s);
    ~GemmPlans();
    GemmPlans(const GemmPlans&) = delete;
    GemmPlans& operator=(const GemmPlans&) = delete;
    // on stream s (the session's, or the capture stream of a pass recorded off the request's path)
    void run(const __nv_bfloat16* A, int M, int K, const __nv_bfloat16* W, int N, float* C, float beta, cudaStream_t s);
    // The log-mel's double-precision products (frontend.cu), column-major as cublasDgemm's NN: C [m, n] = A [m, k] ·
    // B [k, n]. Through cublasLt, which takes its stream per call, so that the front end can be recorded into the
    // encoder's pass graph (a cuBLAS handle is bound to the session's stream); pointers not aligned to 256 bytes go
    // to cublasDgemm, on the session's stream only.
    void run_f64(int m, int n, int k, const double* A, int lda, const double* B, int ldb, double* C, int ldc,
                 cudaStream_t s);
    size_t plans() const { return plans_.size(); }

private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
        cublasLtMatmulAlgo_t algo{};
        bool ok = false;     // false: cublasGemmEx for this shape
        bool banded = false; // algo is the band's, not yet the heuristic's answer for this M
    };
    Plan& plan(int M, int N, int K);
    bool heuristic(Plan& p); // the heuristic's algorithm for p's shape into p.algo
    // C = alpha·A·B + beta·C through p (ok) on stream s, in the workspace (made on first use)
    void matmul(Plan& p, const void* alpha, const void* A, const void* B, const void* beta, void* C, cudaStream_t s);
    static bool aligned256(const void* q) { return reinterpret_cast<uintptr_t>(q) % 256 == 0; } // cublasLt's plans
    static void destroy(Plan& p) noexcept;
    static int band(int M) {
        int b = 0;
        while (b < 30 && (32 << b) < M) ++b;
        return b;
    }

    cublasHandle_t blas_;
    cudaStream_t s_;
    cublasLtHandle_t lt_ = nullptr;
    Buffer ws_;
    std::map<std::tuple<int, int, int>, Plan> plans_;                // by (M, N, K): descriptors and algorithm
    std::map<std::tuple<int, int, int>, cublasLtMatmulAlgo_t> bands_; // by (band of M, N, K): the algorithm
    std::map<std::tuple<int, int, int, int, int, int>, Plan> plans64_; // run_f64's, by (m, n, k, lda, ldb, ldc)
};

} // namespace qasr::cuda::detail
