// The encoder's and the prefill's matrix products: C [M, N] (float32) = A [M, K] (bf16) · W [N, K]ᵀ (bf16) + beta·C,
// float32 accumulation. Through cublasLt with, per shape, the operation and layout descriptions and the heuristic's
// algorithm made once and reused: the host queues a product in ~9–10 µs instead of cublasGemmEx's ~10.5–12.8 µs
// (bench/cuda_launch_cost.cu, H200 machine), on the same kernels (cuBLAS's heuristic picks them for both). The
// passes queue 184 products (0.6B, 11 s), and they are host-bound where the host is slow. Pointers not aligned to
// 256 bytes and shapes without a heuristic answer go to cublasGemmEx.
#pragma once
#include "backend/cuda/check.hpp"

#include <cublasLt.h>
#include <cuda_bf16.h>

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
    size_t plans() const { return plans_.size(); }

private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
        cublasLtMatmulAlgo_t algo{};
        bool ok = false; // false: cublasGemmEx for this shape
    };
    const Plan& plan(int M, int N, int K);
    static void destroy(Plan& p) noexcept;

    cublasHandle_t blas_;
    cudaStream_t s_;
    cublasLtHandle_t lt_ = nullptr;
    Buffer ws_;
    std::map<std::tuple<int, int, int>, Plan> plans_;
};

} // namespace qasr::cuda::detail
