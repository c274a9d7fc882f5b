// What a product costs the first time a prompt length is seen (docs/benchmarks.md, CUDA → Session 15). Per model
// shape, the heuristic's algorithm for the first M of the sequence (the warm-up's) is launched once; then for every
// other M (lengths not seen before, one repeated): (1) that same algorithm, checked for the new M — host µs of the
// check, of the first launch (queued and synchronised) and of a second, and its device µs per launch; (2) the
// heuristic asked again for the new M — host µs of the query, first and second launch, device µs; cublasGemmEx's
// first and second call. Host times of a first launch above ~1 ms mean a kernel the process had not used before.
// Build: part of the CUDA build (bench/CMakeLists.txt); run: build/bench/cuda_first_shape [M...]
#include "cuda_gemm_bench.cuh"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using namespace gemm_bench;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) { return std::chrono::duration<double, std::micro>(Clock::now() - t).count(); }

// device µs per launch of f: 20 launches between two events, after 3
template <class F> double device_us(F&& f, cudaStream_t s) {
    for (int i = 0; i < 3; ++i) f();
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < 20; ++i) f();
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms * 1000.0 / 20;
}

} // namespace

int main(int argc, char** argv) {
    std::vector<int> Ms;
    for (int i = 1; i < argc; ++i) Ms.push_back(std::atoi(argv[i]));
    if (Ms.empty()) Ms = {158, 126, 175, 111, 126, 214, 96};
    int maxM = 0;
    for (int m : Ms) maxM = std::max(maxM, m);
    const Handles k;
    cudaStream_t s = k.s;
    cublasHandle_t h = k.h;
    cublasLtHandle_t lt = k.lt;
    void* ws = k.ws;
    for (const Shape& base : model_shapes(maxM, maxM, false)) {
        __nv_bfloat16 *W, *A;
        float* C;
        CK(cudaMalloc(&W, size_t(base.N) * base.K * 2));
        CK(cudaMalloc(&A, size_t(maxM) * base.K * 2));
        CK(cudaMalloc(&C, size_t(maxM) * base.N * 4));
        fill<<<256, 256, 0, s>>>(W, size_t(base.N) * base.K, 1);
        fill<<<256, 256, 0, s>>>(A, size_t(maxM) * base.K, 2);
        CK(cudaStreamSynchronize(s));
        // the algorithm the heuristic gives for the first M, then used for every other M (checked per M)
        cublasLtMatmulAlgo_t pinned{};
        {
            LtProblem p(Shape{base.name, Ms[0], base.N, base.K}, CUDA_R_32F, ws_bytes);
            cublasLtMatmulHeuristicResult_t r{};
            if (p.heuristics(lt, 1, &r) < 1) continue;
            pinned = r.algo;
            CB(p.run(lt, pinned, W, A, C, ws, s));
            CK(cudaStreamSynchronize(s));
        }
        for (size_t i = 1; i < Ms.size(); ++i) { // pinned first: the only kernels loaded so far are the first M's
            const int M = Ms[i];
            LtProblem p(Shape{base.name, M, base.N, base.K}, CUDA_R_32F, ws_bytes);
            cublasLtMatmulHeuristicResult_t r{};
            auto t = Clock::now();
            const bool ok = p.check(lt, pinned, &r) == CUBLAS_STATUS_SUCCESS;
            const double chk = us_since(t);
            double first = -1, second = -1, dev = -1;
            if (ok) {
                t = Clock::now();
                CB(p.run(lt, pinned, W, A, C, ws, s));
                CK(cudaStreamSynchronize(s));
                first = us_since(t);
                t = Clock::now();
                CB(p.run(lt, pinned, W, A, C, ws, s));
                CK(cudaStreamSynchronize(s));
                second = us_since(t);
                dev = device_us([&] { CB(p.run(lt, pinned, W, A, C, ws, s)); }, s);
            }
            std::printf("%-16s %5d pinned: check %6.1f, first %8.1f, second %6.1f, device %6.1f µs\n", base.name, M,
                        chk, first, second, dev);
        }
        for (int M : Ms) {
            const Shape sh{base.name, M, base.N, base.K};
            LtProblem p(sh, CUDA_R_32F, ws_bytes);
            cublasLtMatmulHeuristicResult_t r{};
            auto t = Clock::now();
            const int got = p.heuristics(lt, 1, &r);
            const double heur = us_since(t);
            double first = -1, second = -1, dev = -1;
            if (got > 0) {
                t = Clock::now();
                CB(p.run(lt, r.algo, W, A, C, ws, s));
                CK(cudaStreamSynchronize(s));
                first = us_since(t);
                t = Clock::now();
                CB(p.run(lt, r.algo, W, A, C, ws, s));
                CK(cudaStreamSynchronize(s));
                second = us_since(t);
                dev = device_us([&] { CB(p.run(lt, r.algo, W, A, C, ws, s)); }, s);
            }
            const float one = 1.0f, zero = 0.0f;
            double gx[2];
            for (double& g : gx) {
                t = Clock::now();
                CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, M, sh.K, &one, W, CUDA_R_16BF, sh.K, A, CUDA_R_16BF,
                                sh.K, &zero, C, CUDA_R_32F, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                CK(cudaStreamSynchronize(s));
                g = us_since(t);
            }
            std::printf("%-16s %5d per-M heuristic %8.1f, first %8.1f, second %6.1f, device %6.1f µs; gemmex first %6.1f, "
                        "second %6.1f\n", sh.name, M, heur, first, second, dev, gx[0], gx[1]);
        }
        CK(cudaFree(W));
        CK(cudaFree(A));
        CK(cudaFree(C));
    }
    return 0;
}
