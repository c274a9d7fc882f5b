// The prefill and encoder matrix products of the CUDA path at the model's shapes, timed on the GPU at hand
// (docs/benchmarks.md, CUDA → Session 8): C [M, N] = A [M, K] (bf16) · W [N, K]ᵀ (bf16), float32 accumulation, as
//  1. cublasGemmEx with a float32 C and CUBLAS_GEMM_DEFAULT (what kernels.cu's gemm() calls),
//  2. the same with a bf16 C,
//  3. cublasLt: every algorithm its heuristic offers (up to 16) for a float32 C, the heuristic's first and the
//     fastest, and the fastest for a bf16 C.
// Per shape: median µs of 50 timed launches (CUDA events around each batch of 10, after 10 warm-ups), and the
// weight bytes per µs (these products read each weight once; at M ≈ 150 they are bandwidth-bound in principle).
// The launches cycle through copies of W filling ≥ 128 MB, so the weights come from HBM as in a prefill, not L2.
// Build: part of the CUDA build (bench/CMakeLists.txt); run: build/bench/cuda_gemm_shapes [M]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_gemm_bench.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using namespace gemm_bench;

template <class F> double time_us(F&& f, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 10; ++i) f();
    std::vector<float> t;
    for (int r = 0; r < 5; ++r) {
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < 10; ++i) f();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 100.0f); // µs per launch
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[t.size() / 2];
}

} // namespace

int main(int argc, char** argv) {
    std::printf("%-20s %5s %6s %6s | %9s %9s | %9s %9s %6s | %9s | %s\n", "shape", "M", "N", "K", "GemmEx f32",
                "GemmEx bf16", "Lt first", "Lt best", "algos", "Lt bf16", "best GB/s of weights");
    return bench_main(argc, argv, true, [&](const Shape& sh, cudaStream_t s, cublasHandle_t h, cublasLtHandle_t lt, void* ws) {
        const size_t na = size_t(sh.M) * sh.K, nw = size_t(sh.N) * sh.K, nc = size_t(sh.M) * sh.N;
        __nv_bfloat16 *A, *Wall, *Cb;
        float* C;
        const int copies = int(std::min<size_t>(64, (size_t(128) << 20) / (nw * 2) + 1));
        int turn = 0;
        CK(cudaMalloc(&A, na * 2));
        CK(cudaMalloc(&Wall, nw * 2 * copies));
        CK(cudaMalloc(&C, nc * 4));
        CK(cudaMalloc(&Cb, nc * 2));
        fill<<<256, 256, 0, s>>>(A, na, 1);
        fill<<<256, 256, 0, s>>>(Wall, nw * copies, 2);
        auto Wn = [&] { return Wall + nw * size_t(turn++ % copies); };
        const float one = 1.0f, zero = 0.0f;
        // column-major view as in kernels.cu: Cᵀ [N, M] = W [N, K] · Aᵀ [K, M]
        const double ex32 = time_us([&] {
            CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, sh.M, sh.K, &one, Wn(), CUDA_R_16BF, sh.K, A, CUDA_R_16BF,
                            sh.K, &zero, C, CUDA_R_32F, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, s);
        const double ex16 = time_us([&] {
            CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, sh.M, sh.K, &one, Wn(), CUDA_R_16BF, sh.K, A, CUDA_R_16BF,
                            sh.K, &zero, Cb, CUDA_R_16BF, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, s);
        double lt_first = 0, lt_best = 1e30, lt16 = 1e30;
        int nalg = 0;
        for (const cudaDataType_t ct : {CUDA_R_32F, CUDA_R_16BF}) {
            const LtProblem P(sh, ct, ws_bytes);
            cublasLtMatmulHeuristicResult_t res[16];
            const int n = P.heuristics(lt, 16, res);
            void* Cp = ct == CUDA_R_32F ? static_cast<void*>(C) : static_cast<void*>(Cb);
            for (int i = 0; i < n; ++i) {
                if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
                const double t = time_us([&] {
                    CB(P.run(lt, res[i].algo, Wn(), A, Cp, ws, s));
                }, s);
                if (ct == CUDA_R_32F) {
                    if (i == 0) lt_first = t;
                    lt_best = std::min(lt_best, t);
                    ++nalg;
                } else {
                    lt16 = std::min(lt16, t);
                }
            }
        }
        const double best = std::min({ex32, ex16, lt_best, lt16});
        std::printf("%-20s %5d %6d %6d | %9.2f %9.2f | %9.2f %9.2f %6d | %9.2f | %.0f\n", sh.name, sh.M, sh.N, sh.K,
                    ex32, ex16, lt_first, lt_best, nalg, lt16, double(nw) * 2 / best / 1e3);
        cudaFree(A);
        cudaFree(Wall);
        cudaFree(C);
        cudaFree(Cb);
    });
}
