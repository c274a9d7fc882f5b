// The decode step's prefetching bf16 matrix-vector product (matvec_prefetch.cu) as a block body, so that a kernel
// can run it for any slice of rows: k_matvec_pf once per block, k_qkv_attention (qkv_attention.cu) for the q/k/v
// rows of its kv head before that head's attention.
#pragma once
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include <cstdint>

namespace qasr::cuda::detail {

constexpr int kPfThreads = 256;
constexpr int kPfWarps = kPfThreads / kWarp;
constexpr size_t kPfMaxSmem = 108 * 1024; // one block's shared memory; two blocks per SM fit in 227 KB
constexpr int kPfMaxDevices = 64;

struct PfArgs {
    const uint16_t* w;
    int64_t N;       // output rows (SwiGLU: the gate rows; the up rows follow at row_off)
    int64_t row_off;
    int rpb;         // rows per block
    const float* x;
    const float* norm_w;
    float eps;
    float* y;
    int early; // trigger the successor at entry
};

// A product kernel's output for row rr of its block from the row's dot products v (SwiGLU: gate, up) and, for
// Epi::Add, the residual rows ys staged in shared memory.
template <int EPI> __device__ __forceinline__ float pf_out(const float* v, const float* ys, int rr) {
    if constexpr (EPI == int(Epi::Store)) return v[0];
    else if constexpr (EPI == int(Epi::Add)) return ys[rr] + v[0];
    else return silu(v[0]) * v[1];
}

__device__ __forceinline__ float dot8_bf16_regs(const uint4 v, const float* x) {
    return bf(v.x & 0xffffu) * x[0] + bf(v.x >> 16) * x[1] + bf(v.y & 0xffffu) * x[2] + bf(v.y >> 16) * x[3] +
           bf(v.z & 0xffffu) * x[4] + bf(v.z >> 16) * x[5] + bf(v.w & 0xffffu) * x[6] + bf(v.w >> 16) * x[7];
}

// KC = K/256: 16-byte chunks of a row per lane. EPI: Epi as int.
// Shared memory: [P][rpb][CPR] weights | K norm weights | K floats of x | rpb residual rows (Epi::Add).
template <int KC, int EPI>
__device__ __forceinline__ void pf_rows(const PfArgs& a, int64_t r0) {
    constexpr int K = KC * 256, CPR = K / 8; // uint4 chunks per row
    constexpr int P = EPI == int(Epi::SwiGLU) ? 2 : 1;
    QASR_TL_ENTRY
    if (a.early) dep_launch();
    extern __shared__ __align__(128) uint4 wsm[];
    __shared__ __align__(8) uint64_t bar;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int nr = int(a.N - r0 < a.rpb ? a.N - r0 : a.rpb);
    float* nws = reinterpret_cast<float*>(wsm + size_t(P) * a.rpb * CPR);
    float* xs = nws + K;
    float* ys = xs + K;
    if (threadIdx.x == 0) {
        mbar_init(&bar);
        mbar_fence_init();
        const uint32_t rb = uint32_t(nr) * CPR * 16;
        mbar_expect(&bar, P * rb + (a.norm_w ? K * 4u : 0u));
        for (int p = 0; p < P; ++p) bulk_copy(wsm + size_t(p) * a.rpb * CPR, a.w + (r0 + p * a.row_off) * K, rb, &bar);
        if (a.norm_w) bulk_copy(nws, a.norm_w, K * 4u, &bar);
    }
    __syncthreads(); // the barrier is initialised before anyone waits on it
    dep_wait();
    QASR_TL_WAITED(kTlMatvecPf, false);
    // The next kernel's blocks start their copies while this one computes. Triggering at entry instead (a chain of
    // kernels copying ahead) measured 13 % slower per token (0.6B bf16, H200; 0.757 vs 0.845 ms after the x fix): the copies delay
    // the chain's own reads. Per kernel (a.early) it is an option.
    if (!a.early) dep_launch();
    // x once per block (every warp reading all of x from L2 makes its lines a hot spot: 128 blocks × 8 warps
    // requests per line), with the residual rows this block adds to
#pragma unroll
    for (int j = 0; j < KC / 4 + (KC % 4 != 0); ++j) {
        const int i = threadIdx.x + j * kPfThreads; // float4 index
        if (i >= K / 4) break;
        const float4 v = __ldcg(reinterpret_cast<const float4*>(a.x) + i);
        reinterpret_cast<float4*>(xs)[i] = v;
    }
    if (EPI == int(Epi::Add) && threadIdx.x < nr) ys[threadIdx.x] = __ldcg(a.y + r0 + threadIdx.x);
    __syncthreads();
    // XREG: lane l keeps its chunks of x in registers (reused over the warp's rows). Wide rows (K ≥ 2048: o, down)
    // have one row per warp, so nothing is reused and 64–96 registers of x only limit which kernels fit an SM
    // together (65536 registers: two 128-register blocks and nothing else); they read x from shared memory.
    constexpr bool XREG = KC <= 4;
    float xv[XREG ? KC * 8 : 1];
    float inv = 1.0f;
    if constexpr (XREG) {
#pragma unroll
        for (int j = 0; j < KC; ++j) {
            const float4* src = reinterpret_cast<const float4*>(xs) + 2 * (lane + j * kWarp);
            const float4 f0 = src[0], f1 = src[1];
            xv[j * 8 + 0] = f0.x, xv[j * 8 + 1] = f0.y, xv[j * 8 + 2] = f0.z, xv[j * 8 + 3] = f0.w;
            xv[j * 8 + 4] = f1.x, xv[j * 8 + 5] = f1.y, xv[j * 8 + 6] = f1.z, xv[j * 8 + 7] = f1.w;
        }
        if (a.norm_w) { // every warp holds all of x across its lanes: the same sum in each, no block reduction
            float ss = 0.0f;
#pragma unroll
            for (int i = 0; i < KC * 8; ++i) ss += xv[i] * xv[i];
            inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
        }
    } else if (a.norm_w) { // the same per-lane order of the squares as above
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < KC; ++j)
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const float v = xs[(lane + j * kWarp) * 8 + i];
                ss += v * v;
            }
        inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
    }
    mbar_wait(&bar, 0);
    QASR_TL_READY();
    if (a.norm_w) {
        if constexpr (XREG) {
#pragma unroll
            for (int j = 0; j < KC; ++j) {
                const float4* nw = reinterpret_cast<const float4*>(nws) + 2 * (lane + j * kWarp);
                const float4 g0 = nw[0], g1 = nw[1];
                const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) xv[j * 8 + i] = xv[j * 8 + i] * inv * g[i];
            }
        } else {
            __syncthreads(); // every warp has its sum of squares before x changes
            for (int i = threadIdx.x; i < K; i += kPfThreads) xs[i] = xs[i] * inv * nws[i];
            __syncthreads();
        }
    }
    for (int rr = warp; rr < nr; rr += kPfWarps) {
        float v[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const uint4* row = wsm + (size_t(p) * a.rpb + rr) * CPR;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < KC; ++j) {
                const int c = lane + j * kWarp;
                if constexpr (XREG) acc += dot8_bf16_regs(row[c], xv + j * 8);
                else acc += dot8_bf16(row[c], xs + c * 8);
            }
            v[p] = warp_sum(acc);
        }
        if (lane == 0) a.y[r0 + rr] = pf_out<EPI>(v, ys, rr);
    }
}


} // namespace qasr::cuda::detail
