// Every cublasLt configuration at the prefill/encoder product shapes (docs/benchmarks.md, CUDA → Session 12):
// C [M, N] (float32) = A [M, K] (bf16) · W [N, K]ᵀ (bf16), float32 accumulation, as kernels.cu's gemm() computes it.
// For each algorithm id the library lists, every tile, split-K count (1, 2, 3, 4, 6, 8) and reduction scheme it
// supports is checked with cublasLtMatmulAlgoCheck and timed; printed per shape: cublasGemmEx (what qasr calls),
// the heuristic's first cublasLt algorithm, and the five fastest configurations with their parameters.
// Timing: a CUDA graph of launches cycling through copies of W filling ≥ 128 MB (weights from HBM, as in a
// prefill; no host launch cost in the figure), replayed 3 times after a warm-up replay; the median µs per launch.
// Whether a configuration gives the same bits on every launch is checked too (split-K reductions may not).
// Build: part of the CUDA build (bench/CMakeLists.txt); run: build/bench/cuda_gemm_algos [M] [M_encoder]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_gemm_bench.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

namespace {

using namespace gemm_bench;

// µs per launch of f(i) (i = the launch's index), launched `n` times inside one graph
double graph_us(const std::function<void(int)>& f, int n, cudaStream_t s) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < n; ++i) f(i);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaGraphLaunch(ge, s));
    std::vector<float> t;
    for (int r = 0; r < 3; ++r) {
        CK(cudaEventRecord(a, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f / float(n));
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[t.size() / 2];
}

struct Config {
    int algo, tile, stages, splitk, red, swizzle;
    double us;
    bool same_bits;
};

template <class T> std::vector<T> cap_list(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
    size_t bytes = 0;
    if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
        return {};
    std::vector<T> v(bytes / sizeof(T));
    CB(cublasLtMatmulAlgoCapGetAttribute(&algo, attr, v.data(), bytes, &bytes));
    return v;
}

} // namespace

int main(int argc, char** argv) {
    return bench_main(argc, argv, false, [&](const Shape& sh, cudaStream_t s, cublasHandle_t h, cublasLtHandle_t lt, void* ws) {
        int ids[256], nids = 0; // the algorithms the library has for these types
        CB(cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F, 256,
                                    ids, &nids));
        const size_t na = size_t(sh.M) * sh.K, nw = size_t(sh.N) * sh.K, nc = size_t(sh.M) * sh.N;
        const int copies = int(std::min<size_t>(64, (size_t(128) << 20) / (nw * 2) + 1));
        __nv_bfloat16 *A, *Wall;
        float *C, *C2;
        CK(cudaMalloc(&A, na * 2));
        CK(cudaMalloc(&Wall, nw * 2 * copies));
        CK(cudaMalloc(&C, nc * 4));
        CK(cudaMalloc(&C2, nc * 4));
        fill<<<256, 256, 0, s>>>(A, na, 1);
        fill<<<256, 256, 0, s>>>(Wall, nw * copies, 2);
        const float one = 1.0f, zero = 0.0f;
        auto W = [&](int i) { return Wall + nw * size_t(i % copies); };
        const double ex = graph_us([&](int i) {
            CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, sh.M, sh.K, &one, W(i), CUDA_R_16BF, sh.K, A, CUDA_R_16BF,
                            sh.K, &zero, C, CUDA_R_32F, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }, copies, s);
        const LtProblem P(sh, CUDA_R_32F, ws_bytes);
        cublasLtMatmulHeuristicResult_t res[1];
        const int nh = P.heuristics(lt, 1, res);
        auto run = [&](const cublasLtMatmulAlgo_t& algo, int i, float* out) { return P.run(lt, algo, W(i), A, out, ws, s); };
        const double heur = nh ? graph_us([&](int i) { CB(run(res[0].algo, i, C)); }, copies, s) : 0.0;
        std::vector<Config> found;
        int checked = 0;
        for (int a = 0; a < nids; ++a) {
            cublasLtMatmulAlgo_t algo;
            if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F, CUDA_R_32F,
                                       ids[a], &algo) != CUBLAS_STATUS_SUCCESS)
                continue;
            std::vector<int> tiles = cap_list<int>(algo, CUBLASLT_ALGO_CAP_TILE_IDS);
            if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
            const std::vector<int> stages = cap_list<int>(algo, CUBLASLT_ALGO_CAP_STAGES_IDS);
            int splitk_ok = 0, redmask = 0, swz = 0;
            size_t w = 0;
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof splitk_ok, &w);
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &redmask, sizeof redmask, &w);
            cublasLtMatmulAlgoCapGetAttribute(&algo, CUBLASLT_ALGO_CAP_CTA_SWIZZLING_SUPPORT, &swz, sizeof swz, &w);
            for (int tile : tiles)
                for (int sk : {1, 2, 3, 4, 6, 8}) {
                    if (sk > 1 && !splitk_ok) continue;
                    for (int red : {0, 1, 2, 4}) {
                        if ((sk == 1) != (red == 0)) continue;
                        if (red && !(redmask & red)) continue;
                        // the first stage count the library accepts for this tile (the undefined one first)
                        cublasLtMatmulAlgo_t al = algo;
                        bool ok = false;
                        int stage = 0;
                        std::vector<int> st_try{CUBLASLT_MATMUL_STAGES_UNDEFINED};
                        st_try.insert(st_try.end(), stages.begin(), stages.end());
                        for (int st : st_try) {
                            al = algo;
                            CB(cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile));
                            CB(cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &st, sizeof st));
                            CB(cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sk, sizeof sk));
                            CB(cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red));
                            cublasLtMatmulHeuristicResult_t chk{};
                            if (P.check(lt, al, &chk) == CUBLAS_STATUS_SUCCESS &&
                                chk.state == CUBLAS_STATUS_SUCCESS && chk.workspaceSize <= ws_bytes &&
                                run(al, 0, C) == CUBLAS_STATUS_SUCCESS) {
                                ok = true;
                                stage = st;
                                break;
                            }
                        }
                        if (!ok || checked >= 1500) continue;
                        ++checked;
                        const double us = graph_us([&](int i) { CB(run(al, i, C)); }, copies, s);
                        // the same launch twice: bit-identical?
                        CB(run(al, 0, C));
                        CB(run(al, 0, C2));
                        std::vector<float> h1(nc), h2(nc);
                        CK(cudaMemcpyAsync(h1.data(), C, nc * 4, cudaMemcpyDeviceToHost, s));
                        CK(cudaMemcpyAsync(h2.data(), C2, nc * 4, cudaMemcpyDeviceToHost, s));
                        CK(cudaStreamSynchronize(s));
                        found.push_back({ids[a], tile, stage, sk, red, 0, us, std::memcmp(h1.data(), h2.data(), nc * 4) == 0});
                    }
                }
        }
        std::sort(found.begin(), found.end(), [](const Config& x, const Config& y) { return x.us < y.us; });
        std::printf("%-16s M %4d N %5d K %5d | GemmEx %6.2f us | Lt heuristic %6.2f | %d configs of %d algorithms timed; fastest:\n",
                    sh.name, sh.M, sh.N, sh.K, ex, heur, checked, nids);
        for (size_t i = 0; i < found.size() && i < 6; ++i)
            std::printf("    %6.2f us  algo %3d tile %3d stages %3d splitK %d red %d  %s  (%.0f GB/s of weights)\n",
                        found[i].us, found[i].algo, found[i].tile, found[i].stages, found[i].splitk, found[i].red,
                        found[i].same_bits ? "same bits" : "BITS DIFFER", double(nw) * 2 / found[i].us / 1e3);
        std::fflush(stdout);
        cudaFree(A);
        cudaFree(Wall);
        cudaFree(C);
        cudaFree(C2);
    });
}
