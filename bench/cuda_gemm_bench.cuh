// What the two product benchmarks (cuda_gemm_shapes.cu, cuda_gemm_algos.cu) share: the prefill/encoder product
// shapes of the models, deterministic bf16 fill, main() with the stream and cuBLAS/cuBLASLt handles.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_bench_check.cuh"

#include <cstdlib>
#include <vector>

namespace gemm_bench {

struct Shape {
    const char* name;
    int M, N, K;
};

// C [M, N] = A [M, K] · W [N, K]ᵀ at the 0.6B decoder (M prompt rows) and encoder (Me audio rows) shapes; with_17b
// adds the 1.7B model's widest ones.
inline std::vector<Shape> model_shapes(int M, int Me, bool with_17b) {
    std::vector<Shape> v = {{"dec qkv (0.6B)", M, 4096, 1024}, {"dec o", M, 1024, 2048},
                            {"dec gate/up", M, 6144, 1024},    {"dec down", M, 1024, 3072},
                            {"enc qkv (0.6B)", Me, 2688, 896}, {"enc o", Me, 896, 896},
                            {"enc fc1", Me, 3584, 896},        {"enc fc2", Me, 896, 3584}};
    if (with_17b)
        v.insert(v.end(), {{"dec qkv (1.7B)", M, 4096, 2048}, {"dec gate/up (1.7B)", M, 12288, 2048},
                           {"dec down (1.7B)", M, 2048, 6144}, {"enc fc1 (1.7B)", Me, 4096, 1024}});
    return v;
}

__global__ void fill(__nv_bfloat16* p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        unsigned h = unsigned(i) * 2654435761u ^ seed;
        h ^= h >> 13;
        p[i] = __float2bfloat16(float(h % 2001) / 1000.0f - 1.0f);
    }
}

constexpr size_t ws_bytes = 32u << 20; // cuBLAS(Lt) workspace

// main() of both benchmarks: [M] [M_encoder] from the command line, the stream and handles, then per_shape(shape,
// stream, cuBLAS handle, cuBLASLt handle, workspace) for every shape of model_shapes().
// The stream, a cuBLAS handle on it, a cuBLASLt handle and ws_bytes of workspace (kept until the process ends).
struct Handles {
    cudaStream_t s = nullptr;
    cublasHandle_t h = nullptr;
    cublasLtHandle_t lt = nullptr;
    void* ws = nullptr;
    Handles() {
        CK(cudaStreamCreate(&s));
        CB(cublasCreate(&h));
        CB(cublasSetStream(h, s));
        CB(cublasLtCreate(&lt));
        CK(cudaMalloc(&ws, ws_bytes));
    }
};

template <class F> int bench_main(int argc, char** argv, bool with_17b, F&& per_shape) {
    const int M = argc > 1 ? std::atoi(argv[1]) : 158;
    const int Me = argc > 2 ? std::atoi(argv[2]) : 143;
    const Handles k;
    for (const Shape& sh : model_shapes(M, Me, with_17b)) per_shape(sh, k.s, k.h, k.lt, k.ws);
    return 0;
}

// The cublasLt description of C (type ct) = W · A as gemm() computes it (column-major view: Cᵀ [N, M] = W [N, K] ·
// Aᵀ [K, M], float32 compute) with a preference for at most ws_bytes of workspace.
struct LtProblem {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    LtProblem(const Shape& sh, cudaDataType_t ct, size_t ws_bytes) {
        CB(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
        CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
        CB(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
        CB(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, sh.K, sh.N, sh.K));
        CB(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, sh.K, sh.M, sh.K));
        CB(cublasLtMatrixLayoutCreate(&lc, ct, sh.N, sh.M, sh.N));
        CB(cublasLtMatmulPreferenceCreate(&pref));
        CB(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    }
    // up to n of the heuristic's algorithms, best first
    int heuristics(cublasLtHandle_t lt, int n, cublasLtMatmulHeuristicResult_t* res) const {
        int got = 0;
        CB(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, n, res, &got));
        return got;
    }
    // C = W · A with algorithm algo
    cublasStatus_t run(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, const void* W, const void* A, void* C, void* ws,
                       cudaStream_t s) const {
        const float one = 1.0f, zero = 0.0f;
        return cublasLtMatmul(lt, op, &one, W, la, A, lb, &zero, C, lc, C, lc, &algo, ws, ws_bytes, s);
    }
    cublasStatus_t check(cublasLtHandle_t lt, const cublasLtMatmulAlgo_t& algo, cublasLtMatmulHeuristicResult_t* r) const {
        return cublasLtMatmulAlgoCheck(lt, op, la, lb, lc, lc, &algo, r);
    }
    LtProblem(const LtProblem&) = delete;
    LtProblem& operator=(const LtProblem&) = delete;
    ~LtProblem() {
        cublasLtMatmulPreferenceDestroy(pref);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(op);
    }
};

} // namespace gemm_bench
