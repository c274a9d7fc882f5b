// Matrix-vector products of the decode step whose weights arrive before their input (bf16 weights, sm_90).
//
// The weights of a decode step never depend on its activations. Each block owns a contiguous slice of rows; before
// it waits for its predecessor (programmatic dependent launch) one thread copies the slice into shared memory with
// a bulk copy (cp.async.bulk, completing on an mbarrier), and the kernel triggers its successor's launch as soon
// as its own wait returns. So while kernel n computes, kernel n+1's blocks are resident and their weights stream
// in; what is left after the wait is one L2 round trip for x (and the residual rows), the products out of shared
// memory and the store. Slices are sized so that two kernels' blocks fit one SM (≤ kPfMaxSmem each, ≤ 128
// registers per thread).
//
// x is read from L2 once per block into shared memory: with every warp reading all of x, the 1024 requests per
// cache line of x (128 blocks × 8 warps) made those lines a hot spot that cost ~2.7 µs per kernel (a synthetic
// chain on the H200, docs/benchmarks.md). Then lane l holds x[8c .. 8c+7] for the chunks c = l + 32j in registers
// (the same chunks it reads of every row), so a row costs its 2·K bytes of shared-memory reads and a warp
// reduction. Same sums in the same order as k_matvec's bf16 path, except the RMSNorm's sum of squares (per warp
// here, per block there).
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include "core/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>

namespace qasr::cuda {
namespace {

using namespace detail;

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
__global__ void __launch_bounds__(kPfThreads, 2) k_matvec_pf(PfArgs a) {
    constexpr int K = KC * 256, CPR = K / 8; // uint4 chunks per row
    constexpr int P = EPI == int(Epi::SwiGLU) ? 2 : 1;
    QASR_TL_ENTRY
    if (a.early) dep_launch();
    extern __shared__ __align__(128) uint4 wsm[];
    __shared__ __align__(8) uint64_t bar;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t r0 = int64_t(blockIdx.x) * a.rpb;
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
        load_x8<KC>(xs, lane, xv);
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

// MLX affine-quantized rows (BITS 4/6/8, group size gs), the same scheme: the block's codes, scales and biases are
// bulk-copied into shared memory before the wait. Lane l takes the 16-code chunks c = l + 32j (j < NCH, K = 512·NCH)
// of every row, with x[16c … 16c+15] and their sum in registers; per chunk acc += scale·Σ q·x + bias·Σ x, in
// k_matvec's order (so the same sums but for the RMSNorm's sum of squares, per warp here).
struct PfqArgs {
    const uint8_t* codes;
    const uint16_t* scales;
    const uint16_t* biases;
    int64_t N, row_off;
    int rpb, gs;
    const float* x;
    const float* norm_w;
    float eps;
    float* y;
    int early;
};

// Shared memory: [P][rpb][K·BITS/8] codes | [P][rpb][K/gs] scales | the biases alike | K norm weights | K floats of x
// | rpb residual rows (Epi::Add). Every part a multiple of 16 bytes (pfq_smem).
template <int BITS, int NCH, int EPI>
__global__ void __launch_bounds__(kPfThreads, 2) k_matvec_pf_q(PfqArgs a) {
    constexpr int K = NCH * 512, RB = K * BITS / 8;
    constexpr int P = EPI == int(Epi::SwiGLU) ? 2 : 1;
    QASR_TL_ENTRY
    if (a.early) dep_launch();
    extern __shared__ __align__(128) uint4 wsm[];
    __shared__ __align__(8) uint64_t bar;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int NG = K / a.gs;
    const int64_t r0 = int64_t(blockIdx.x) * a.rpb;
    const int nr = int(a.N - r0 < a.rpb ? a.N - r0 : a.rpb);
    uint8_t* codes = reinterpret_cast<uint8_t*>(wsm);
    uint16_t* scs = reinterpret_cast<uint16_t*>(codes + size_t(P) * a.rpb * RB);
    uint16_t* bis = scs + size_t(P) * a.rpb * NG;
    float* nws = reinterpret_cast<float*>(bis + size_t(P) * a.rpb * NG);
    float* xs = nws + K;
    float* ys = xs + K;
    if (threadIdx.x == 0) {
        mbar_init(&bar);
        mbar_fence_init();
        const uint32_t cb = uint32_t(nr) * RB, sb = uint32_t(nr) * NG * 2;
        mbar_expect(&bar, P * (cb + 2 * sb) + (a.norm_w ? K * 4u : 0u));
        for (int p = 0; p < P; ++p) {
            const int64_t r = r0 + p * a.row_off;
            bulk_copy(codes + size_t(p) * a.rpb * RB, a.codes + r * RB, cb, &bar);
            bulk_copy(scs + size_t(p) * a.rpb * NG, a.scales + r * NG, sb, &bar);
            bulk_copy(bis + size_t(p) * a.rpb * NG, a.biases + r * NG, sb, &bar);
        }
        if (a.norm_w) bulk_copy(nws, a.norm_w, K * 4u, &bar);
    }
    __syncthreads();
    dep_wait();
    QASR_TL_WAITED(kTlMatvecPf, false);
    if (!a.early) dep_launch();
    // XREG as in k_matvec_pf: x in registers where a warp has several rows (K = 1024). Wider rows (one per warp)
    // read it from shared memory, stored chunk-transposed — float4 q of chunk c at xq[q·NC + c] — so that the lanes'
    // float4 reads of their chunks are consecutive (the plain layout put 16 lanes on one bank: 0.6B 8-bit decode
    // 0.92 → 1.88 ms/token).
    constexpr bool XREG = NCH <= 2;
    constexpr int NC = K / 16;
    float4* xq = reinterpret_cast<float4*>(xs);
    for (int i = threadIdx.x; i < K / 4; i += kPfThreads) {
        const float4 v = __ldcg(reinterpret_cast<const float4*>(a.x) + i);
        if constexpr (XREG) xq[i] = v;
        else xq[(i % 4) * NC + i / 4] = v;
    }
    if (EPI == int(Epi::Add) && threadIdx.x < nr) ys[threadIdx.x] = __ldcg(a.y + r0 + threadIdx.x);
    __syncthreads();
    // chunk j of this lane (chunk c = lane + 32j): 16 floats of x
    auto chunk = [&](int j, float (&f)[16]) {
        const int c = lane + j * kWarp;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 v = XREG ? xq[c * 4 + q] : xq[q * NC + c];
            f[4 * q] = v.x, f[4 * q + 1] = v.y, f[4 * q + 2] = v.z, f[4 * q + 3] = v.w;
        }
    };
    float xv[XREG ? NCH : 1][16];
    if constexpr (XREG) {
#pragma unroll
        for (int j = 0; j < NCH; ++j) chunk(j, xv[XREG ? j : 0]);
    }
    // chunk j of x from the registers (XREG) or shared memory
    auto xchunk = [&](int j, float (&f)[16]) {
        if constexpr (XREG) {
#pragma unroll
            for (int i = 0; i < 16; ++i) f[i] = xv[XREG ? j : 0][i];
        } else {
            chunk(j, f);
        }
    };
    float inv = 1.0f;
    if (a.norm_w) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j) {
            float f[16];
            xchunk(j, f);
#pragma unroll
            for (int i = 0; i < 16; ++i) ss += f[i] * f[i];
        }
        inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
    }
    mbar_wait(&bar, 0);
    QASR_TL_READY();
    if (a.norm_w) {
        if constexpr (XREG) {
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const float4* nw = reinterpret_cast<const float4*>(nws) + (lane + j * kWarp) * 4;
#pragma unroll
                for (int i = 0; i < 16; i += 4) {
                    const float4 g = nw[i / 4];
                    float* x = xv[XREG ? j : 0];
                    x[i] = x[i] * inv * g.x, x[i + 1] = x[i + 1] * inv * g.y;
                    x[i + 2] = x[i + 2] * inv * g.z, x[i + 3] = x[i + 3] * inv * g.w;
                }
            }
        } else {
            __syncthreads(); // every warp has its sum of squares before x changes in place
            for (int i = threadIdx.x; i < K / 4; i += kPfThreads) { // float4 i of x: chunk i / 4, quarter i % 4
                const float4 g = reinterpret_cast<const float4*>(nws)[i];
                float4& v = xq[(i % 4) * NC + i / 4];
                v = make_float4(v.x * inv * g.x, v.y * inv * g.y, v.z * inv * g.z, v.w * inv * g.w);
            }
            __syncthreads();
        }
    }
    float xsum[NCH];
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
        float f[16];
        xchunk(j, f);
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) t += f[i];
        xsum[j] = t;
    }
    for (int rr = warp; rr < nr; rr += kPfWarps) {
        float v[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const uint8_t* row = codes + (size_t(p) * a.rpb + rr) * RB;
            const uint16_t* sc = scs + (size_t(p) * a.rpb + rr) * NG;
            const uint16_t* bi = bis + (size_t(p) * a.rpb + rr) * NG;
            v[p] = warp_sum(qrow_dot<BITS, NCH>(row, sc, bi, a.gs, lane, xsum, xchunk));
        }
        if (lane == 0) a.y[r0 + rr] = pf_out<EPI>(v, ys, rr);
    }
}

// bf16 slices too large for shared memory (the 1.7B model's q/k/v, gate/up and down): the block's rows stream
// through kPfsStages buffers of SR rows (all P parts of a row together). The first stages are bulk-copied before
// the dependency wait; each later one is issued into the buffer the block has just finished. x is staged (and
// RMS-normalised) in shared memory and read from there; warp w takes row w of a stage.
constexpr int kPfsStages = 3;
constexpr size_t kPfsStageBytes = 24 * 1024;

struct PfsArgs {
    const uint16_t* w;
    int64_t N, row_off;
    int rpb, K, SR;
    const float* x;
    const float* norm_w;
    float eps;
    float* y;
    int early;
};

template <int EPI>
__global__ void __launch_bounds__(kPfThreads, 2) k_matvec_pf_stream(PfsArgs a) {
    constexpr int P = EPI == int(Epi::SwiGLU) ? 2 : 1;
    QASR_TL_ENTRY
    if (a.early) dep_launch();
    extern __shared__ __align__(128) uint4 wsm[];
    __shared__ __align__(8) uint64_t bars[kPfsStages];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int K = a.K, SR = a.SR;
    const int64_t r0 = int64_t(blockIdx.x) * a.rpb;
    const int nr = int(a.N - r0 < a.rpb ? a.N - r0 : a.rpb);
    const int nst = (nr + SR - 1) / SR;
    const size_t stage_elems = size_t(SR) * P * K; // bf16 elements per stage buffer
    uint16_t* stages = reinterpret_cast<uint16_t*>(wsm);
    float* xs = reinterpret_cast<float*>(stages + kPfsStages * stage_elems);
    float* nws = xs + K;
    float* ys = nws + (a.norm_w ? K : 0);
    // stage st into buffer st % kPfsStages: rows r0 + st·SR … of each part, part p at [p][SR][K] of the buffer
    auto issue = [&](int st, uint32_t extra) {
        const int rows = min(SR, nr - st * SR);
        const uint32_t rb = uint32_t(rows) * K * 2;
        uint64_t* bar = &bars[st % kPfsStages];
        mbar_expect(bar, P * rb + extra);
        uint16_t* dst = stages + size_t(st % kPfsStages) * stage_elems;
        for (int p = 0; p < P; ++p)
            bulk_copy(dst + size_t(p) * SR * K, a.w + (r0 + int64_t(st) * SR + p * a.row_off) * K, rb, bar);
    };
    if (threadIdx.x == 0) {
        for (int i = 0; i < kPfsStages; ++i) mbar_init(&bars[i]);
        mbar_fence_init();
        for (int st = 0; st < kPfsStages && st < nst; ++st) {
            const bool nw = st == 0 && a.norm_w;
            issue(st, nw ? uint32_t(K) * 4 : 0u);
            if (nw) bulk_copy(nws, a.norm_w, uint32_t(K) * 4, &bars[0]);
        }
    }
    __syncthreads();
    dep_wait();
    QASR_TL_WAITED(kTlMatvecPf, false);
    if (!a.early) dep_launch();
    for (int i = threadIdx.x; i < K / 4; i += kPfThreads)
        reinterpret_cast<float4*>(xs)[i] = __ldcg(reinterpret_cast<const float4*>(a.x) + i);
    if (EPI == int(Epi::Add))
        for (int i = threadIdx.x; i < nr; i += kPfThreads) ys[i] = __ldcg(a.y + r0 + i);
    __syncthreads();
    if (a.norm_w) { // every warp sums the squares itself (no block reduction); the weights came with stage 0
        float ss = 0.0f;
        for (int i = lane; i < K; i += kWarp) ss += xs[i] * xs[i];
        const float inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
        if (nst > 0) mbar_wait(&bars[0], 0);
        __syncthreads(); // every warp has its sum before x changes
        for (int i = threadIdx.x; i < K; i += kPfThreads) xs[i] = xs[i] * inv * nws[i];
        __syncthreads();
    }
    const int n8 = K / 8;
    for (int st = 0; st < nst; ++st) {
        const int b = st % kPfsStages;
        mbar_wait(&bars[b], uint32_t(st / kPfsStages) & 1u);
        const int rows = min(SR, nr - st * SR);
        if (warp < rows) {
            float v[P];
#pragma unroll
            for (int p = 0; p < P; ++p) {
                const uint4* row = reinterpret_cast<const uint4*>(stages + size_t(b) * stage_elems + (size_t(p) * SR + warp) * K);
                float acc = 0.0f;
                for (int c = lane; c < n8; c += kWarp) acc += dot8_bf16(row[c], xs + c * 8);
                v[p] = warp_sum(acc);
            }
            if (lane == 0) a.y[r0 + st * SR + warp] = pf_out<EPI>(v, ys, st * SR + warp);
        }
        __syncthreads(); // buffer b is read: refill it (its generic-proxy reads ordered before the bulk writes)
        if (threadIdx.x == 0 && st + kPfsStages < nst) {
            fence_proxy_async();
            issue(st + kPfsStages, 0u);
        }
    }
}

template <class K> void set_pf_attrs(K* k) {
    QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPfMaxSmem)));
    static const int carveout = [] { // QASR_CUDA_PF_CARVEOUT=percent: the shared-memory carveout preferred (A/B)
        const char* e = std::getenv("QASR_CUDA_PF_CARVEOUT");
        return e ? std::atoi(e) : -1;
    }();
    if (carveout >= 0) QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
}

template <int KC>
void set_pf_smem() {
    set_pf_attrs(k_matvec_pf<KC, int(Epi::Store)>);
    set_pf_attrs(k_matvec_pf<KC, int(Epi::Add)>);
    set_pf_attrs(k_matvec_pf<KC, int(Epi::SwiGLU)>);
}

template <int BITS, int NCH>
void set_pfq_smem() {
    set_pf_attrs(k_matvec_pf_q<BITS, NCH, int(Epi::Store)>);
    set_pf_attrs(k_matvec_pf_q<BITS, NCH, int(Epi::Add)>);
    set_pf_attrs(k_matvec_pf_q<BITS, NCH, int(Epi::SwiGLU)>);
}
template <int BITS>
void set_pfq_smem_all() {
    set_pfq_smem<BITS, 2>();
    set_pfq_smem<BITS, 4>();
    set_pfq_smem<BITS, 6>();
}

struct DeviceInfo {
    bool ok = false; // sm_90 or newer
    int sms = 0;
};
DeviceInfo g_dev[kPfMaxDevices];
std::once_flag g_once[kPfMaxDevices];

bool g_pf_on = [] {
    const char* e = std::getenv("QASR_CUDA_MV_PREFETCH");
    return !(e && std::string(e) == "0");
}();
bool g_pfs_on = [] { // QASR_CUDA_MV_STREAM=0: bf16 slices too large for shared memory through k_matvec (A/B)
    const char* e = std::getenv("QASR_CUDA_MV_STREAM");
    return !(e && std::string(e) == "0");
}();
bool g_pfq_on = [] { // QASR_CUDA_MV_PREFETCH_Q=0: quantized weights through k_matvec (A/B)
    const char* e = std::getenv("QASR_CUDA_MV_PREFETCH_Q");
    return !(e && std::string(e) == "0");
}();

} // namespace

QASR_TL_BIND(timeline_bind_prefetch)

void matvec_prefetch_prepare(int ordinal) {
    if (ordinal < 0 || ordinal >= kPfMaxDevices) return;
    std::call_once(g_once[ordinal], [ordinal] {
        DeviceInfo d;
        int major = 0, dev = 0;
        QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ordinal));
        QASR_CUDA(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, ordinal));
        QASR_CUDA(cudaGetDevice(&dev));
        if (dev != ordinal) fail("cuda", "matvec_prefetch_prepare: device " + std::to_string(ordinal) + " is not current");
        d.ok = major >= 9;
        if (d.ok) {
            set_pf_smem<4>();
            set_pf_smem<8>();
            set_pf_smem<12>();
            set_pf_attrs(k_matvec_pf_stream<int(Epi::Store)>);
            set_pf_attrs(k_matvec_pf_stream<int(Epi::Add)>);
            set_pf_attrs(k_matvec_pf_stream<int(Epi::SwiGLU)>);
            set_pfq_smem_all<4>();
            set_pfq_smem_all<6>();
            set_pfq_smem_all<8>();
        }
        g_dev[ordinal] = d;
    });
}

namespace {
// The launch shape where the prefetching kernel applies to W (else false): rows per block and shared memory.
bool pf_plan(const DMat& W, Epi epi, int* rpb_out, size_t* smem_out) {
    if (!g_pf_on || W.bits != 16 || !pdl_enabled()) return false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kPfMaxDevices || !g_dev[dev].ok) return false;
    const int64_t K = W.cols;
    const int KC = int(K / 256);
    if (K % 256 != 0 || (KC != 4 && KC != 8 && KC != 12)) return false;
    if (reinterpret_cast<uintptr_t>(W.data) % 16 != 0) return false;
    const int P = epi == Epi::SwiGLU ? 2 : 1;
    const int64_t N = W.rows / P;
    const int sms = g_dev[dev].sms;
    const int rpb = int((N + sms - 1) / sms);
    const size_t smem = size_t(P) * rpb * size_t(K) * 2 + size_t(K) * 8 + (epi == Epi::Add ? size_t(rpb) * 4 : 0);
    if (smem > kPfMaxSmem) return false;
    *rpb_out = rpb, *smem_out = smem;
    return true;
}
} // namespace

namespace {
bool matvec_prefetch_q(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s,
                       bool early) {
    if (!g_pf_on || !g_pfq_on || !pdl_enabled() || (W.bits != 4 && W.bits != 6 && W.bits != 8)) return false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kPfMaxDevices || !g_dev[dev].ok) return false;
    const int64_t K = W.cols;
    const int NCH = int(K / 512);
    if (K % 512 != 0 || (NCH != 2 && NCH != 4 && NCH != 6) || W.gs < 16 || K % W.gs != 0) return false;
    const int NG = int(K / W.gs);
    const int64_t RB = K * W.bits / 8;
    if ((NG * 2) % 16 != 0 || RB % 16 != 0) return false;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(W.data) || !aligned(W.scales) || !aligned(W.biases) || !aligned(x) || (norm_w && !aligned(norm_w))) return false;
    const int P = epi == Epi::SwiGLU ? 2 : 1;
    const int64_t N = W.rows / P;
    const int sms = g_dev[dev].sms;
    const int rpb = int((N + sms - 1) / sms);
    const size_t smem = size_t(P) * rpb * size_t(RB + 4 * NG) + size_t(K) * 8 + (epi == Epi::Add ? size_t(rpb) * 4 : 0);
    if (smem > kPfMaxSmem) return false;
    PfqArgs a{static_cast<const uint8_t*>(W.data), reinterpret_cast<const uint16_t*>(W.scales),
              reinterpret_cast<const uint16_t*>(W.biases), N, epi == Epi::SwiGLU ? N : 0, rpb, W.gs, x, norm_w, eps, y, early};
    const dim3 grid(unsigned((N + rpb - 1) / rpb));
#define QASR_PFQ_LAUNCH(b, n)                                                                                     \
    switch (epi) {                                                                                                \
    case Epi::Store: launch(k_matvec_pf_q<b, n, int(Epi::Store)>, grid, dim3(kPfThreads), smem, s, a); break;     \
    case Epi::Add: launch(k_matvec_pf_q<b, n, int(Epi::Add)>, grid, dim3(kPfThreads), smem, s, a); break;         \
    case Epi::SwiGLU: launch(k_matvec_pf_q<b, n, int(Epi::SwiGLU)>, grid, dim3(kPfThreads), smem, s, a); break;   \
    }
#define QASR_PFQ_BITS(b)                                                                                          \
    if (NCH == 2) { QASR_PFQ_LAUNCH(b, 2) }                                                                       \
    else if (NCH == 4) { QASR_PFQ_LAUNCH(b, 4) }                                                                  \
    else { QASR_PFQ_LAUNCH(b, 6) }
    if (W.bits == 8) { QASR_PFQ_BITS(8) }
    else if (W.bits == 6) { QASR_PFQ_BITS(6) }
    else { QASR_PFQ_BITS(4) }
#undef QASR_PFQ_BITS
#undef QASR_PFQ_LAUNCH
    QASR_CUDA_LAUNCHED();
    return true;
}
} // namespace

namespace {
bool matvec_prefetch_stream(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi,
                            cudaStream_t s, bool early) {
    if (!g_pf_on || !g_pfs_on || W.bits != 16 || !pdl_enabled()) return false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kPfMaxDevices || !g_dev[dev].ok) return false;
    const int64_t K = W.cols;
    const int P = epi == Epi::SwiGLU ? 2 : 1;
    const int64_t N = W.rows / P;
    if (K % 8 != 0 || K > 8192 || N > 65536) return false; // not the LM head: k_matvec streams it at ~3.4 TB/s
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(W.data) || !aligned(x) || (norm_w && !aligned(norm_w))) return false;
    const int sms = g_dev[dev].sms;
    const int rpb = int((N + sms - 1) / sms);
    // rows per stage: ~kPfsStageBytes, at most one per warp, fewer where x (and the norm weights) leave less room
    const size_t fixed = size_t(K) * 4 * (norm_w ? 2 : 1) + (epi == Epi::Add ? size_t(rpb) * 4 : 0);
    const int64_t row_b = int64_t(P) * K * 2;
    if (fixed >= kPfMaxSmem) return false;
    const int64_t fit = int64_t(kPfMaxSmem - fixed) / (kPfsStages * row_b);
    const int SR = int(std::min<int64_t>({kPfThreads / kWarp, std::max<int64_t>(1, int64_t(kPfsStageBytes) / row_b), fit}));
    if (SR < 1) return false;
    const size_t smem = size_t(kPfsStages) * SR * size_t(row_b) + fixed;
    PfsArgs a{static_cast<const uint16_t*>(W.data), N, epi == Epi::SwiGLU ? N : 0, rpb, int(K), SR, x, norm_w, eps, y, early};
    const dim3 grid(unsigned((N + rpb - 1) / rpb));
    switch (epi) {
    case Epi::Store: launch(k_matvec_pf_stream<int(Epi::Store)>, grid, dim3(kPfThreads), smem, s, a); break;
    case Epi::Add: launch(k_matvec_pf_stream<int(Epi::Add)>, grid, dim3(kPfThreads), smem, s, a); break;
    case Epi::SwiGLU: launch(k_matvec_pf_stream<int(Epi::SwiGLU)>, grid, dim3(kPfThreads), smem, s, a); break;
    }
    QASR_CUDA_LAUNCHED();
    return true;
}
} // namespace

namespace {
bool matvec_prefetch_bf16(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s,
                          bool early) {
    int rpb = 0;
    size_t smem = 0;
    if (!pf_plan(W, epi, &rpb, &smem)) return false;
    const int64_t K = W.cols;
    const int KC = int(K / 256);
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(x) || (norm_w && !aligned(norm_w))) return false;
    const int P = epi == Epi::SwiGLU ? 2 : 1;
    const int64_t N = W.rows / P;
    PfArgs a{static_cast<const uint16_t*>(W.data), N, epi == Epi::SwiGLU ? N : 0, rpb, x, norm_w, eps, y, early};
    const dim3 grid(unsigned((N + rpb - 1) / rpb));
#define QASR_PF_LAUNCH(kc)                                                                                        \
    switch (epi) {                                                                                                \
    case Epi::Store: launch(k_matvec_pf<kc, int(Epi::Store)>, grid, dim3(kPfThreads), smem, s, a); break;         \
    case Epi::Add: launch(k_matvec_pf<kc, int(Epi::Add)>, grid, dim3(kPfThreads), smem, s, a); break;             \
    case Epi::SwiGLU: launch(k_matvec_pf<kc, int(Epi::SwiGLU)>, grid, dim3(kPfThreads), smem, s, a); break;       \
    }
    if (KC == 4) { QASR_PF_LAUNCH(4) }
    else if (KC == 8) { QASR_PF_LAUNCH(8) }
    else { QASR_PF_LAUNCH(12) }
#undef QASR_PF_LAUNCH
    QASR_CUDA_LAUNCHED();
    return true;
}
} // namespace

bool matvec_prefetch(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s,
                     bool early) {
    if (W.bits != 16) return matvec_prefetch_q(W, x, norm_w, eps, y, epi, s, early);
    if (matvec_prefetch_bf16(W, x, norm_w, eps, y, epi, s, early)) return true;
    return matvec_prefetch_stream(W, x, norm_w, eps, y, epi, s, early);
}

} // namespace qasr::cuda
