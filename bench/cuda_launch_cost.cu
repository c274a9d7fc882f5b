// Host cost of queueing the work of a row pass (encoder, prefill): how long the host spends per call to put a kernel
// or a product on a stream, and whether the device or the host sets the pace of a chain of them.
//   - kernels: <<<>>> and cudaLaunchKernelEx with the programmatic-serialization attribute, 1 and 158 blocks;
//   - products at the 0.6B prefill/encoder shapes: cublasGemmEx (what kernels.cu's gemm() calls; the row passes
//     called it until session 13) against cublasLtMatmul with the descriptions and the heuristic's algorithm made
//     once and reused (gemm.cu), and what making that plan costs once.
// Also: whether two or four host threads, each with its own stream, handle and plan, queue products in parallel.
// Per case: n calls queued back to back (after 20 warm-up calls and a synchronize); "host" is the time the calls take
// to return, "wall" the time until the device has finished them all, both per call.
// Build: part of the CUDA build (bench/CMakeLists.txt); run: build/bench/cuda_launch_cost [M] [M_encoder]
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_gemm_bench.cuh"

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace gemm_bench;
using Clock = std::chrono::steady_clock;

__global__ void k_empty(int* p) {
    if (p && threadIdx.x == 1024) *p = 0; // never true: keeps the argument
}

void report(const char* what, const std::function<void()>& call, cudaStream_t s, int n = 200) {
    for (int i = 0; i < 20; ++i) call();
    CK(cudaStreamSynchronize(s));
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) call();
    const auto t1 = Clock::now();
    CK(cudaStreamSynchronize(s));
    const auto t2 = Clock::now();
    const double host = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
    const double wall = std::chrono::duration<double, std::micro>(t2 - t0).count() / n;
    std::printf("%-44s host %6.2f us/call | wall %6.2f us/call | %s\n", what, host, wall,
                host > 0.9 * wall ? "host-bound" : "device-bound");
}

} // namespace

int main(int argc, char** argv) {
    bool kernels_done = false;
    return bench_main(argc, argv, false, [&](const Shape& sh, cudaStream_t s, cublasHandle_t h, cublasLtHandle_t lt, void* ws) {
        if (!kernels_done) {
            kernels_done = true;
            for (int blocks : {1, 158}) {
                char name[64];
                std::snprintf(name, sizeof name, "kernel <<<%d, 256>>>", blocks);
                report(name, [&] { k_empty<<<blocks, 256, 0, s>>>(nullptr); }, s);
                cudaLaunchAttribute attr[1];
                attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
                attr[0].val.programmaticStreamSerializationAllowed = 1;
                cudaLaunchConfig_t cfg{};
                cfg.gridDim = dim3(unsigned(blocks));
                cfg.blockDim = dim3(256);
                cfg.stream = s;
                cfg.attrs = attr;
                cfg.numAttrs = 1;
                std::snprintf(name, sizeof name, "kernel cudaLaunchKernelEx + PDL, %d blocks", blocks);
                report(name, [&] { CK(cudaLaunchKernelEx(&cfg, k_empty, static_cast<int*>(nullptr))); }, s);
            }
        }
        __nv_bfloat16 *A, *W;
        float* C;
        CK(cudaMalloc(&A, size_t(sh.M) * sh.K * 2));
        CK(cudaMalloc(&W, size_t(sh.N) * sh.K * 2));
        CK(cudaMalloc(&C, size_t(sh.M) * sh.N * 4));
        fill<<<256, 256, 0, s>>>(A, size_t(sh.M) * sh.K, 1);
        fill<<<256, 256, 0, s>>>(W, size_t(sh.N) * sh.K, 2);
        char name[96];
        for (float beta : {0.0f, 1.0f}) {
            std::snprintf(name, sizeof name, "%s GemmEx beta %g", sh.name, beta);
            const float one = 1.0f;
            report(name, [&] {
                CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, sh.N, sh.M, sh.K, &one, W, CUDA_R_16BF, sh.K, A, CUDA_R_16BF,
                                sh.K, &beta, C, CUDA_R_32F, sh.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            }, s);
        }
        const auto t0 = Clock::now();
        LtProblem p(sh, CUDA_R_32F, ws_bytes);
        cublasLtMatmulHeuristicResult_t r[1];
        const int got = p.heuristics(lt, 1, r);
        std::printf("%-44s %.1f us (descriptions + heuristic, once per shape)\n", (std::string(sh.name) + " Lt plan").c_str(),
                    std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        if (got > 0) {
            std::snprintf(name, sizeof name, "%s Lt cached algo", sh.name);
            report(name, [&] { CB(p.run(lt, r[0].algo, W, A, C, ws, s)); }, s);
        }
        if (got > 0 && sh.name == std::string("dec qkv (0.6B)")) {
            // Do two host threads queue products in parallel (each its own stream, handle and plan)? Per call
            // times of each thread while the other queues too.
            for (int threads : {1, 2, 4}) {
                std::vector<std::thread> ts;
                std::vector<double> host(threads);
                for (int t = 0; t < threads; ++t)
                    ts.emplace_back([&, t] {
                        cudaStream_t st;
                        CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
                        cublasLtHandle_t l2;
                        CB(cublasLtCreate(&l2));
                        void* w2;
                        float* c2;
                        CK(cudaMalloc(&w2, ws_bytes));
                        CK(cudaMalloc(&c2, size_t(sh.M) * sh.N * 4));
                        LtProblem p2(sh, CUDA_R_32F, ws_bytes);
                        cublasLtMatmulHeuristicResult_t r2[1];
                        p2.heuristics(l2, 1, r2);
                        for (int i = 0; i < 20; ++i) CB(p2.run(l2, r2[0].algo, W, A, c2, w2, st));
                        CK(cudaStreamSynchronize(st));
                        const int n = 200;
                        const auto a = Clock::now();
                        for (int i = 0; i < n; ++i) CB(p2.run(l2, r2[0].algo, W, A, c2, w2, st));
                        host[t] = std::chrono::duration<double, std::micro>(Clock::now() - a).count() / n;
                        CK(cudaStreamSynchronize(st));
                        CK(cudaFree(w2));
                        CK(cudaFree(c2));
                        cublasLtDestroy(l2);
                        CK(cudaStreamDestroy(st));
                    });
                for (auto& t : ts) t.join();
                std::printf("%-44s", (std::to_string(threads) + " host threads, Lt products, own streams").c_str());
                for (double h : host) std::printf(" %6.2f", h);
                std::printf(" us/call per thread\n");
            }
        }
        CK(cudaFree(A));
        CK(cudaFree(W));
        CK(cudaFree(C));
    });
}
