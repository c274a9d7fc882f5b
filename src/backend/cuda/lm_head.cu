// The decode step's LM head fused with the argmax's first stage (bf16 head, sm_90): logits = W · RMSNorm(x) and,
// per block, (max, lowest index of the max, Σ exp(v − max)) over its rows — the partials k_argmax_final merges.
//
// The head is the step's one large read (0.6B: 151936 × 1024 bf16, 311 MB). With the weights of every layer held
// in L2 the step was only 26 µs faster, but leaving the head and its argmax out saved 114 µs (H200, 40 tokens), a
// third more than its bytes at ~4 TB/s. So: a grid of two blocks per SM, each streaming its contiguous rows through
// a ring of shared-memory stages (8 rows, one per warp; bulk copies completing on an mbarrier per stage, the first
// ones issued before the dependency wait), x normalised once per block and held in registers, and the argmax
// partials kept on the fly (no second kernel reading the logits back).
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lm_head.cuh"

#include "core/error.hpp"

#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <string>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kHThreads = 256, kHWarps = kHThreads / kWarp;
constexpr int kHMaxStages = 12;
constexpr size_t kHRingBytes = 80 * 1024; // per block; two blocks per SM
constexpr int kProxyGroup = 64;           // the screened head's proxy: MLX 8-bit, group 64 (head_screen.cu)

// What both heads take: V rows, x and its RMSNorm weights, the logits and the argmax partials, the ring's stages.
struct HeadCommon {
    int64_t V;
    const float* x;
    const float* norm_w;
    float eps;
    float* logits;
    float* part;
    int stages;
};
struct HeadArgs : HeadCommon {
    const uint16_t* w;
};

// Before the dependency wait: thread 0 initialises the ring's stage barriers and issues its first stages, and the
// block copies the RMSNorm weights [K] into gs (they do not depend on the previous kernel: one L2 round trip fewer
// after the wait; visible after stage_x's barrier).
template <class Issue>
__device__ __forceinline__ void head_prefetch(uint64_t* full, int stages, int nst, Issue&& issue, float* gs,
                                              const float* norm_w, int K) {
    if (threadIdx.x == 0) {
        for (int i = 0; i < stages; ++i) mbar_init(&full[i]);
        mbar_fence_init();
        for (int st = 0; st < stages && st < nst; ++st) issue(st);
    }
    if (norm_w)
        for (int i = threadIdx.x; i < K / 4; i += kHThreads)
            reinterpret_cast<float4*>(gs)[i] = __ldg(reinterpret_cast<const float4*>(norm_w) + i);
    __syncthreads(); // the barriers are initialised before anyone waits on them
}

// After the dependency wait: the next kernel may launch; x [K] into shared memory, visible to the block.
__device__ __forceinline__ void stage_x(float* xs, const float* x, int K) {
    dep_launch();
    for (int i = threadIdx.x; i < K / 4; i += kHThreads)
        reinterpret_cast<float4*>(xs)[i] = __ldcg(reinterpret_cast<const float4*>(x) + i);
    __syncthreads();
}

// A lane's row r with logit v: stored, and folded into the lane's running (max, lowest index, Σ exp(v − max)).
__device__ __forceinline__ void head_take(float v, int64_t r, float* logits, float& m, int& id, float& sum) {
    logits[r] = v;
    if (v > m) sum = sum * expf(m - v) + 1.0f, m = v, id = int(r);
    else sum += expf(v - m);
}

// The block's argmax partial from its warps' running values (lane 0 of each): part[3·block …] = max, index, Σexp.
__device__ __forceinline__ void head_partial(float m, int id, float sum, float* part) {
    __shared__ float wm[kHWarps], wsum[kHWarps];
    __shared__ int wid[kHWarps];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    if (lane == 0) wm[warp] = m, wid[warp] = id, wsum[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -FLT_MAX, S = 0.0f;
        int I = 0x7fffffff;
        for (int w = 0; w < kHWarps; ++w)
            if (wm[w] > M || (wm[w] == M && wid[w] < I)) M = wm[w], I = wid[w];
        for (int w = 0; w < kHWarps; ++w)
            if (wsum[w] > 0.0f) S += wsum[w] * expf(wm[w] - M);
        part[3 * blockIdx.x] = M;
        part[3 * blockIdx.x + 1] = __int_as_float(I);
        part[3 * blockIdx.x + 2] = S;
    }
}

// The block's rows stage by stage: warp w takes row w of each stage (increasing rows), its lane's part of the dot
// product from row_dot(stage buffer); each stage, once read, is refilled with the stage `stages` later (issue).
// The warp's sums (every lane gets each by the butterfly) are held one per lane, lane i the i-th of each run of 32
// rows, and every 32 rows each lane stores its logit and folds it into its own running argmax (head_take), so the
// per-row work after the sum is one select instead of lane 0's serial store, compare and exp. The lanes' (max,
// lowest index, Σexp) are merged at the end, then the block's partial (head_partial). The ring slot and its phase
// are counted, not divided out of the stage number (two integer divisions per row were a third of the proxy
// head's instructions, ncu: issue slots 47 % busy).
template <class Issue, class RowDot>
__device__ __forceinline__ void head_rows(const HeadCommon& a, uint64_t* full, int nst, int64_t r0, int64_t r1, Issue&& issue,
                                          RowDot&& row_dot) {
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    float m = -FLT_MAX, sum = 0.0f, held = 0.0f;
    int id = 0x7fffffff;
    int b = 0;
    uint32_t phase = 0;
    for (int st = 0; st < nst; ++st) {
        mbar_wait(&full[b], phase);
        const int64_t r = r0 + int64_t(st) * kHWarps + warp;
        if (r < r1) {
            const float v = warp_sum(row_dot(b));
            held = lane == (st & (kWarp - 1)) ? v : held;
        }
        __syncthreads(); // stage b is read: refill it (generic-proxy reads ordered before the bulk writes)
        if (threadIdx.x == 0 && st + a.stages < nst) {
            fence_proxy_async();
            issue(st + a.stages);
        }
        if (++b == a.stages) b = 0, phase ^= 1u;
        if ((st & (kWarp - 1)) == kWarp - 1 || st == nst - 1) { // the run's rows, one per lane
            const int64_t rr = r0 + int64_t(st - (st & (kWarp - 1)) + lane) * kHWarps + warp;
            if (lane <= (st & (kWarp - 1)) && rr < r1) head_take(held, rr, a.logits, m, id, sum);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) { // the lanes' running values merged (ties: the lowest index)
        const float om = __shfl_xor_sync(0xffffffffu, m, o), os = __shfl_xor_sync(0xffffffffu, sum, o);
        const int oi = __shfl_xor_sync(0xffffffffu, id, o);
        const float M = fmaxf(m, om);
        sum = (sum > 0.0f ? sum * expf(m - M) : 0.0f) + (os > 0.0f ? os * expf(om - M) : 0.0f);
        if (om > m || (om == m && oi < id)) id = oi;
        m = M;
    }
    head_partial(m, id, sum, a.part);
}

// KC = K/256: lane l holds x[8c … 8c+7] for the chunks c = l + 32j (as k_matvec_pf).
template <int KC>
__global__ void __launch_bounds__(kHThreads, 2) k_lm_head(HeadArgs a) {
    constexpr int K = KC * 256, CPR = K / 8, SR = kHWarps; // uint4 chunks per row, rows per stage
    extern __shared__ __align__(128) uint4 ring[];
    __shared__ __align__(8) uint64_t full[kHMaxStages];
    __shared__ __align__(16) float xs[K], gsm[K];
    QASR_TL_ENTRY
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t r0 = a.V * blockIdx.x / gridDim.x, r1 = a.V * (blockIdx.x + 1) / gridDim.x;
    const int nst = int((r1 - r0 + SR - 1) / SR);
    auto issue = [&](int st) {
        const int rows = int(min(int64_t(SR), r1 - r0 - int64_t(st) * SR));
        const uint32_t bytes = uint32_t(rows) * K * 2;
        uint64_t* bar = &full[st % a.stages];
        mbar_expect(bar, bytes);
        bulk_copy(ring + size_t(st % a.stages) * SR * CPR, a.w + (r0 + int64_t(st) * SR) * K, bytes, bar);
    };
    head_prefetch(full, a.stages, nst, issue, gsm, a.norm_w, K);
    dep_wait();
    QASR_TL_WAITED(kTlMatvec, false);
    stage_x(xs, a.x, K);
    float xv[KC * 8];
    head_x_bf16<KC>(xs, a.norm_w ? gsm : nullptr, a.eps, lane, xv);
    head_rows(a, full, nst, r0, r1, issue,
              [&](int b) { return head_dot_bf16<KC>(ring + (size_t(b) * SR + warp) * CPR, lane, xv); });
}

// MLX affine-quantized head (BITS 4/6/8, group size gs; K = 512·NCH): the same ring and partials; a stage holds 8
// rows' codes, then their scales, then their biases (three bulk copies). Lane l takes the 16-code chunks
// c = l + 32j of every row with x[16c … 16c+15] and their sum in registers, per chunk acc += scale·Σ q·x + bias·Σ x
// (k_matvec_pf_q's order).
struct HeadQArgs : HeadCommon {
    const uint8_t* codes;
    const uint16_t* scales;
    const uint16_t* biases;
    int gs;
    uint32_t stage_bytes; // codes + scales + biases of 8 rows, a multiple of 16
};

// Integer dot products of 4 byte pairs: unsigned codes × signed bytes, unsigned × unsigned.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
__device__ __forceinline__ int dp4a_uu(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// XQ (8-bit codes only; the screened head's proxy, head_screen.cu): the rows are packed (each row's codes, then its
// bf16 scales, then its biases: one bulk copy per stage instead of three — small copies had held the proxy at
// ~2.65 TB/s, ncu), and x̂ is rounded to int16 steps of max|x̂|/32767
// and split into a signed high and an unsigned low byte, so a chunk's Σ q·x is 8 exact dp4a (4 codes each) instead
// of 16 code extractions, int→float conversions and multiply-adds — the conversions' throughput had kept the 8-bit
// head at ~2.3 TB/s. The rounding of x̂ (≤ 0.504 of a step per value: a rounded reciprocal) is part of the screen's bound.
template <int BITS, int NCH, bool XQ = false>
__global__ void __launch_bounds__(kHThreads, 2) k_lm_head_q(HeadQArgs a) {
    static_assert(!XQ || BITS == 8, "the int16 x path takes 8-bit codes");
    constexpr int K = NCH * 512, RB = K * BITS / 8, SR = kHWarps;
    extern __shared__ __align__(128) uint4 ring[];
    __shared__ __align__(8) uint64_t full[kHMaxStages];
    __shared__ __align__(16) float xs[K], gsm[K];
    QASR_TL_ENTRY
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int NG = K / a.gs;
    const int64_t r0 = a.V * blockIdx.x / gridDim.x, r1 = a.V * (blockIdx.x + 1) / gridDim.x;
    const int nst = int((r1 - r0 + SR - 1) / SR);
    uint8_t* base = reinterpret_cast<uint8_t*>(ring);
    auto issue = [&](int st) {
        const int rows = int(min(int64_t(SR), r1 - r0 - int64_t(st) * SR));
        const int64_t r = r0 + int64_t(st) * SR;
        uint64_t* bar = &full[st % a.stages];
        uint8_t* dst = base + size_t(st % a.stages) * a.stage_bytes;
        if constexpr (XQ) { // packed rows (codes, scales, biases): one copy per stage
            const uint32_t bytes = uint32_t(rows) * uint32_t(proxy_row_bytes(K));
            mbar_expect(bar, bytes);
            bulk_copy(dst, a.codes + r * proxy_row_bytes(K), bytes, bar);
            return;
        }
        const uint32_t cb = uint32_t(rows) * RB, sb = uint32_t(rows) * NG * 2;
        mbar_expect(bar, cb + 2 * sb);
        bulk_copy(dst, a.codes + r * RB, cb, bar);
        bulk_copy(dst + SR * RB, a.scales + r * NG, sb, bar);
        bulk_copy(dst + SR * RB + SR * NG * 2, a.biases + r * NG, sb, bar);
    };
    head_prefetch(full, a.stages, nst, issue, gsm, a.norm_w, K);
    dep_wait();
    QASR_TL_WAITED(kTlMatvec, false);
    stage_x(xs, a.x, K);
    float xv[NCH][16];
#pragma unroll
    for (int j = 0; j < NCH; ++j)
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 v = reinterpret_cast<const float4*>(xs)[(lane + j * kWarp) * 4 + q];
            xv[j][4 * q] = v.x, xv[j][4 * q + 1] = v.y, xv[j][4 * q + 2] = v.z, xv[j][4 * q + 3] = v.w;
        }
    if (a.norm_w) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j)
#pragma unroll
            for (int i = 0; i < 16; ++i) ss += xv[j][i] * xv[j][i];
        const float inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
#pragma unroll
        for (int j = 0; j < NCH; ++j)
#pragma unroll
            for (int q = 0; q < 4; ++q) {
                const float4 g = reinterpret_cast<const float4*>(gsm)[(lane + j * kWarp) * 4 + q];
                xv[j][4 * q] = xv[j][4 * q] * inv * g.x, xv[j][4 * q + 1] = xv[j][4 * q + 1] * inv * g.y;
                xv[j][4 * q + 2] = xv[j][4 * q + 2] * inv * g.z, xv[j][4 * q + 3] = xv[j][4 * q + 3] * inv * g.w;
            }
    }
    float xsum[NCH];
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
        float t = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) t += xv[j][i];
        xsum[j] = t;
    }
    if constexpr (XQ) {
        float am = 0.0f;
#pragma unroll
        for (int j = 0; j < NCH; ++j)
#pragma unroll
            for (int i = 0; i < 16; ++i) am = fmaxf(am, fabsf(xv[j][i]));
        am = warp_max(am); // all of x̂ is across the warp's lanes
        const float sx = am > 0.0f ? am / 32767.0f : 1.0f, rx = 1.0f / sx; // |x̂ − sx·q| ≤ 0.504·sx
        uint32_t hi[NCH][4], lo[NCH][4];
#pragma unroll
        for (int j = 0; j < NCH; ++j)
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                hi[j][w] = lo[j][w] = 0;
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int q = max(-32767, min(32767, __float2int_rn(xv[j][4 * w + k] * rx)));
                    hi[j][w] |= uint32_t((q >> 8) & 255) << (8 * k);
                    lo[j][w] |= uint32_t(q & 255) << (8 * k);
                }
            }
        head_rows(a, full, nst, r0, r1, issue, [&](int b) {
            const uint8_t* packed = base + size_t(b) * a.stage_bytes + warp * proxy_row_bytes(K);
            const uint4* row = reinterpret_cast<const uint4*>(packed);
            const uint16_t* sc = reinterpret_cast<const uint16_t*>(packed + RB);
            const uint16_t* bi = sc + NG;
            float acc = 0.0f;
#pragma unroll
            for (int j = 0; j < NCH; ++j) {
                const int c = lane + j * kWarp;
                const uint4 q = row[c];
                int h = dp4a_us(q.x, hi[j][0], 0), l = dp4a_uu(q.x, lo[j][0], 0);
                h = dp4a_us(q.y, hi[j][1], h), l = dp4a_uu(q.y, lo[j][1], l);
                h = dp4a_us(q.z, hi[j][2], h), l = dp4a_uu(q.z, lo[j][2], l);
                h = dp4a_us(q.w, hi[j][3], h), l = dp4a_uu(q.w, lo[j][3], l);
                const int g = c / (kProxyGroup / 16); // the proxy's group size is fixed (checked at launch)
                acc += bf(sc[g]) * (sx * float(h * 256 + l)) + bf(bi[g]) * xsum[j];
            }
            return acc;
        });
        return;
    }
    head_rows(a, full, nst, r0, r1, issue, [&](int b) {
        const uint8_t* stage = base + size_t(b) * a.stage_bytes;
        const uint8_t* row = stage + warp * RB;
        const uint16_t* sc = reinterpret_cast<const uint16_t*>(stage + SR * RB) + warp * NG;
        const uint16_t* bi = reinterpret_cast<const uint16_t*>(stage + SR * RB + SR * NG * 2) + warp * NG;
        return qrow_dot<BITS, NCH>(row, sc, bi, a.gs, lane, xsum, [&](int j, float (&f)[16]) {
#pragma unroll
            for (int i = 0; i < 16; ++i) f[i] = xv[j][i];
        });
    });
}

bool g_head_q_on = [] { // QASR_CUDA_LM_HEAD_Q=0: quantized heads through k_matvec and the separate argmax (A/B)
    const char* e = std::getenv("QASR_CUDA_LM_HEAD_Q");
    return !(e && std::string(e) == "0");
}();

bool g_head_on = [] { // QASR_CUDA_LM_HEAD=0: the head through k_matvec and a separate argmax pass (A/B)
    const char* e = std::getenv("QASR_CUDA_LM_HEAD");
    return !(e && std::string(e) == "0");
}();

} // namespace

QASR_TL_BIND(timeline_bind_head)

namespace {
int lm_head_argmax_q(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, float* part,
                     int max_parts, cudaStream_t s, bool xq = false) {
    if (!g_head_on || !g_head_q_on || !pdl_enabled() || (W.bits != 4 && W.bits != 6 && W.bits != 8)) return 0;
    if (xq && (W.bits != 8 || W.scales || W.biases || W.gs != kProxyGroup)) return 0; // the proxy: packed rows
    const int64_t K = W.cols;
    const int NCH = int(K / 512);
    if (K % 512 != 0 || (NCH != 2 && NCH != 4) || W.gs < 16 || K % W.gs != 0) return 0;
    const int NG = int(K / W.gs);
    const int64_t RB = K * W.bits / 8;
    if ((NG * 2) % 16 != 0 || RB % 16 != 0) return 0;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(W.data) || (!xq && (!aligned(W.scales) || !aligned(W.biases))) || !aligned(x) || (norm_w && !aligned(norm_w)))
        return 0;
    int dev = 0, major = 0, sms = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (major < 9) return 0;
    const int grid = std::min(2 * sms, max_parts);
    const uint32_t stage_bytes = uint32_t(kHWarps) * uint32_t(xq ? proxy_row_bytes(int(K)) : RB + 4 * NG);
    const int stages = int(std::min<size_t>(kHMaxStages, kHRingBytes / stage_bytes));
    if (grid < 1 || stages < 2 || W.rows < int64_t(grid) * kHWarps) return 0;
    const size_t smem = size_t(stages) * stage_bytes;
    HeadQArgs a{{W.rows, x, norm_w, eps, logits, part, stages}, static_cast<const uint8_t*>(W.data),
                reinterpret_cast<const uint16_t*>(W.scales), reinterpret_cast<const uint16_t*>(W.biases), W.gs, stage_bytes};
    auto go = [&](auto k) {
        QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        launch(k, dim3(unsigned(grid)), dim3(kHThreads), smem, s, a);
    };
    if (xq) NCH == 2 ? go(k_lm_head_q<8, 2, true>) : go(k_lm_head_q<8, 4, true>);
    else if (W.bits == 8) NCH == 2 ? go(k_lm_head_q<8, 2>) : go(k_lm_head_q<8, 4>);
    else if (W.bits == 6) NCH == 2 ? go(k_lm_head_q<6, 2>) : go(k_lm_head_q<6, 4>);
    else NCH == 2 ? go(k_lm_head_q<4, 2>) : go(k_lm_head_q<4, 4>);
    QASR_CUDA_LAUNCHED();
    return grid;
}
} // namespace

int lm_head_argmax_proxy(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, float* part,
                         int max_parts, cudaStream_t s) {
    return lm_head_argmax_q(W, x, norm_w, eps, logits, part, max_parts, s, true);
}

int lm_head_argmax(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, float* part,
                   int max_parts, cudaStream_t s) {
    if (W.bits != 16) return lm_head_argmax_q(W, x, norm_w, eps, logits, part, max_parts, s);
    if (!g_head_on || !pdl_enabled() || W.cols % 256 != 0) return 0;
    const int KC = int(W.cols / 256);
    if (KC != 4 && KC != 8) return 0;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(W.data) || !aligned(x) || (norm_w && !aligned(norm_w))) return 0;
    int dev = 0, major = 0, sms = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (major < 9) return 0;
    // QASR_CUDA_HEAD_BPS / QASR_CUDA_HEAD_RING_KB: blocks per SM and ring bytes per block (A/B; default 2 and 80)
    static const int bps = [] {
        const char* e = std::getenv("QASR_CUDA_HEAD_BPS");
        return e ? std::clamp(std::atoi(e), 1, 4) : 2;
    }();
    static const size_t ring = [] {
        const char* e = std::getenv("QASR_CUDA_HEAD_RING_KB");
        return e ? size_t(std::clamp(std::atoi(e), 32, 200)) * 1024 : kHRingBytes;
    }();
    const int grid = std::min(bps * sms, max_parts);
    const size_t stage_bytes = size_t(kHWarps) * W.cols * 2;
    const int stages = int(std::min<size_t>(kHMaxStages, ring / stage_bytes));
    if (grid < 1 || stages < 2 || W.rows < int64_t(grid) * kHWarps) return 0;
    const size_t smem = size_t(stages) * stage_bytes;
    HeadArgs a{{W.rows, x, norm_w, eps, logits, part, stages}, static_cast<const uint16_t*>(W.data)};
    if (KC == 4) {
        QASR_CUDA(cudaFuncSetAttribute(k_lm_head<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        launch(k_lm_head<4>, dim3(unsigned(grid)), dim3(kHThreads), smem, s, a);
    } else {
        QASR_CUDA(cudaFuncSetAttribute(k_lm_head<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        launch(k_lm_head<8>, dim3(unsigned(grid)), dim3(kHThreads), smem, s, a);
    }
    QASR_CUDA_LAUNCHED();
    return grid;
}

} // namespace qasr::cuda
