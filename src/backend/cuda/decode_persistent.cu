// One decode step as ONE persistent cooperative kernel (bf16 decoder weights, sm_90): one block per SM stays
// resident for the whole step, and the ~145 kernel boundaries of the per-layer path become grid barriers.
//
// The weights never depend on the activations, so each block streams ITS rows of every matrix of the step, in
// order, through a ring of shared-memory slots filled by bulk copies (cp.async.bulk, completion on an mbarrier per
// slot): while the block waits at a barrier or computes one phase, the copies of the next phases are in flight, so
// the HBM stream does not stop at the barriers. A slot is refilled with the chunk S positions later as soon as the
// block has consumed it.
//
// Phases per layer (barrier after each): q/k/v rows of RMSNorm(x) | decode attention (decode_attention.cuh, split
// partials, no merge) | merge of the partials + o rows, x += | gate/up rows of RMSNorm(x), SwiGLU | down rows,
// x += . Then the LM head rows of RMSNorm(x) with each block's (max, argmax, Σexp) over its rows | block 0 merges:
// token, log-probability, ring, count, position.
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_persistent.cuh"
#include "backend/cuda/device_util.cuh"

#include "core/error.hpp"
#include "core/log.hpp"

#include <cooperative_groups.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

namespace qasr::cuda {

namespace {

using namespace detail;
namespace cg = cooperative_groups;

constexpr int kThreads = 256; // 8 warps; the decode-attention body runs in the first kDecThreads threads
constexpr int kWarps = kThreads / kWarp;
constexpr int kSlots = 4;      // ring depth
constexpr int kMaxRows = 64;   // rows of one chunk (per matrix of a dual chunk)
constexpr int kMaxSplits = 16; // decode-attention key splits (the merge's weights live in the dots buffer)
constexpr int kRowGroup = 4;   // rows a warp multiplies per pass over x

enum Phase { kQKV = 0, kO = 1, kGU = 2, kDown = 3, kHead = 4, kEnd = 5 };

__device__ __forceinline__ int64_t lmin(int64_t a, int64_t b) { return a < b ? a : b; }

// ---- the step's weight stream: which rows of which matrix, chunk by chunk ----------------------------------------
struct Mat {
    const uint16_t* w;
    int64_t n; // rows of one part (a dual matrix: gate rows, then as many up rows)
    int k;
    bool dual;
};

// The layer table is copied into shared memory at the start of the step (`layers`): the producer looks up a
// matrix for every chunk it issues, and a global load there would sit on the critical path each time.
__device__ __forceinline__ Mat mat_of(const PersistArgs& a, const PersistLayer* layers, int li, int ph) {
    const int hd = a.hd, qkvN = (a.Hq + 2 * a.Hkv) * hd;
    if (ph == kHead) return {a.head, a.V, a.D, false};
    const PersistLayer& l = layers[li];
    if (ph == kQKV) return {l.qkv, qkvN, a.D, false};
    if (ph == kO) return {l.o, a.D, a.Hq * hd, false};
    if (ph == kGU) return {l.gateup, a.I, a.D, true};
    return {l.down, a.D, a.I, false};
}

// This block's rows [r0, r1) of a matrix phase, in chunks of `cr` rows.
struct Span {
    int64_t r0, r1;
    int cr, n; // rows per chunk, chunks
};
__device__ __forceinline__ Span span_of(const Mat& m, uint32_t slot_bytes) {
    const int64_t G = gridDim.x, b = blockIdx.x;
    const int64_t row_b = int64_t(m.k) * 2 * (m.dual ? 2 : 1);
    Span s{m.n * b / G, m.n * (b + 1) / G, int(lmin(kMaxRows, int64_t(slot_bytes) / row_b)), 0};
    s.n = s.r1 > s.r0 ? int((s.r1 - s.r0 + s.cr - 1) / s.cr) : 0;
    return s;
}

// This block's span of each phase kind (the same for every layer), computed once per step: the producer issues
// a chunk without recomputing them (64-bit divisions cost ~1 µs per chunk on its critical path).
struct Spans {
    Span s[kEnd];
};

// The producer's position in the stream (thread 0 of each block).
struct Cursor {
    int li = 0, ph = kQKV, c = 0;
    __device__ void skip_empty(const PersistArgs& a, const Spans& sp) {
        while (ph != kEnd && c >= sp.s[ph].n) {
            c = 0;
            if (ph == kHead) {
                ph = kEnd;
            } else if (ph != kDown) {
                ++ph;
            } else if (li + 1 < a.L) { // the next layer's q/k/v
                ph = kQKV;
                ++li;
            } else {
                ph = kHead;
            }
        }
    }
};

struct Ring {
    const PersistLayer* layers; // shared-memory copy of the layer table
    const Spans* spans;         // shared memory
    uint16_t* base;
    uint64_t* bars;
    uint32_t slot_bytes;
    long long wait_clk = 0, dots_clk = 0, epi_clk = 0, issue_clk = 0; // profile (thread 0's clocks)
    int consumed = 0; // chunks consumed so far (slot = consumed % kSlots, parity = consumed / kSlots & 1)
    __device__ uint16_t* slot(int i) const { return base + int64_t(i) * (slot_bytes / 2); }
};

// Thread 0: the next chunk of the stream (if any) into ring slot si, completing on its mbarrier.
__device__ void issue(const PersistArgs& a, const Ring& ring, Cursor& cur, int si) {
    cur.skip_empty(a, *ring.spans);
    if (cur.ph == kEnd) return;
    uint16_t* slot = ring.slot(si);
    uint64_t* bar = ring.bars + si;
    const Mat m = mat_of(a, ring.layers, cur.li, cur.ph);
    const Span& sp = ring.spans->s[cur.ph];
    const int64_t r = sp.r0 + int64_t(cur.c) * sp.cr;
    const int nr = int(lmin(sp.cr, sp.r1 - r));
    const uint32_t bytes = uint32_t(nr) * uint32_t(m.k) * 2;
    mbar_expect(bar, m.dual ? 2 * bytes : bytes);
    bulk_copy(slot, m.w + r * m.k, bytes, bar);
    if (m.dual) bulk_copy(slot + int64_t(nr) * m.k, m.w + (r + m.n) * m.k, bytes, bar);
    ++cur.c;
}

// ---- block-local helpers -------------------------------------------------------------------------------------------
// The staging loads below are issued kU at a time before any is used: every stage sits on the step's critical
// path between two grid barriers, and a loop that waits for each L2 load in turn costs ~K/128 round trips.
constexpr int kU = 8;
static_assert(decode_partial_floats(128) == 128 + 4, "stage_merge reads records of hd + 4 floats");

// xs = x (or RMSNorm(x)·w when w is non-null); x may be written by other blocks before the last barrier (L2 reads).
// K is a multiple of 4; the loads of x and w are issued together.
__device__ void stage(const float* x, int K, const float* w, float eps, float* xs, float* red) {
    float ss = 0.0f;
    for (int k0 = threadIdx.x * 4; k0 < K; k0 += kThreads * 4 * kU) {
        float4 v[kU], g[kU];
#pragma unroll
        for (int u = 0; u < kU; ++u)
            if (k0 + u * kThreads * 4 < K) {
                v[u] = __ldcg(reinterpret_cast<const float4*>(x + k0 + u * kThreads * 4));
                if (w) g[u] = __ldg(reinterpret_cast<const float4*>(w + k0 + u * kThreads * 4));
            }
#pragma unroll
        for (int u = 0; u < kU; ++u)
            if (k0 + u * kThreads * 4 < K) {
                ss += v[u].x * v[u].x + v[u].y * v[u].y + v[u].z * v[u].z + v[u].w * v[u].w;
                if (w) v[u] = make_float4(v[u].x * g[u].x, v[u].y * g[u].y, v[u].z * g[u].z, v[u].w * g[u].w);
                *reinterpret_cast<float4*>(xs + k0 + u * kThreads * 4) = v[u];
            }
    }
    if (w) { // xs holds x·w: scale by 1/rms (the same products as x·(1/rms)·w up to rounding order)
        ss = block_sum(ss, red);
        const float inv = rsqrtf(ss / float(K) + eps);
        for (int k = threadIdx.x; k < K; k += kThreads) xs[k] *= inv;
    }
    __syncthreads();
}

// RMSNorm of the embedding row of token `tok` (bf16, D a multiple of 8) into xs; also x = the row (this block's
// grid-stride share).
__device__ void stage_embed(const uint16_t* row, int D, const float* w, float eps, float* x, float* xs, float* red) {
    float ss = 0.0f;
    for (int k = threadIdx.x * 8; k < D; k += kThreads * 8) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(row + k));
        const float4 g0 = __ldg(reinterpret_cast<const float4*>(w + k)), g1 = __ldg(reinterpret_cast<const float4*>(w + k + 4));
        const float gw[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float lo = bf(u[i] & 0xffffu), hi = bf(u[i] >> 16);
            xs[k + 2 * i] = lo * gw[2 * i], xs[k + 2 * i + 1] = hi * gw[2 * i + 1];
            ss += lo * lo + hi * hi;
        }
    }
    for (int64_t d = int64_t(blockIdx.x) * kThreads + threadIdx.x; d < D; d += int64_t(gridDim.x) * kThreads)
        x[d] = bf(row[d]);
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / float(D) + eps);
    for (int k = threadIdx.x; k < D; k += kThreads) xs[k] *= inv;
    __syncthreads();
}

// xs = the attention output of every head: merge of the decode-attention split partials (split-key softmax).
// First every (head, split) weight e^(m_s − M) / Σ_s l_s e^(m_s − M) into shared memory (one load pair per thread
// and record), then each thread's outputs as float4 sums over the splits, the loads of a split issued together.
__device__ void stage_merge(const PersistArgs& a, float* xs, float* wts) {
    const int hd = a.hd, S = a.splits, PS = hd + 4, n = a.Hq * hd; // PS = decode_partial_floats(hd)
    for (int i = threadIdx.x; i < a.Hq * S; i += kThreads) {
        wts[i] = __ldcg(a.part + int64_t(i) * PS + hd);         // m
        wts[a.Hq * S + i] = __ldcg(a.part + int64_t(i) * PS + hd + 1); // l
    }
    __syncthreads();
    for (int h = threadIdx.x; h < a.Hq; h += kThreads) {
        float M = -INFINITY;
        for (int s = 0; s < S; ++s) M = fmaxf(M, wts[h * S + s]);
        float L = 0.0f;
        for (int s = 0; s < S; ++s) {
            const float m = wts[h * S + s];
            L += m == -INFINITY ? 0.0f : wts[a.Hq * S + h * S + s] * expf(m - M);
        }
        for (int s = 0; s < S; ++s) {
            const float m = wts[h * S + s];
            wts[2 * a.Hq * S + h * S + s] = m == -INFINITY ? 0.0f : expf(m - M) / L;
        }
    }
    __syncthreads();
    const float* ws = wts + 2 * a.Hq * S;
    for (int i = threadIdx.x * 4; i < n; i += kThreads * 4) {
        const int h = i / hd, d = i % hd;
        const float* rec = a.part + int64_t(h) * S * PS + d;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s0 = 0; s0 < S; s0 += kU) {
            float4 v[kU];
#pragma unroll
            for (int u = 0; u < kU; ++u)
                if (s0 + u < S) v[u] = __ldcg(reinterpret_cast<const float4*>(rec + int64_t(s0 + u) * PS));
#pragma unroll
            for (int u = 0; u < kU; ++u)
                if (s0 + u < S) {
                    const float wgt = ws[h * S + s0 + u];
                    o.x += v[u].x * wgt, o.y += v[u].y * wgt, o.z += v[u].z * wgt, o.w += v[u].w * wgt;
                }
        }
        *reinterpret_cast<float4*>(xs + i) = o;
    }
    __syncthreads();
}

// dots[j] = row j of the chunk (bf16 [nrows, K] in shared memory) · xs. Warp w takes groups of kRowGroup rows.
__device__ void chunk_dots(const uint16_t* wsm, int nrows, int K, const float* xs, float* dots) {
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
    for (int r0 = w * kRowGroup; r0 < nrows; r0 += kWarps * kRowGroup) {
        float acc[kRowGroup];
#pragma unroll
        for (int i = 0; i < kRowGroup; ++i) acc[i] = 0.0f;
#pragma unroll 2
        for (int e = lane * 4; e < K; e += kWarp * 4) {
            const float4 xv = *reinterpret_cast<const float4*>(xs + e);
            uint2 v[kRowGroup];
#pragma unroll
            for (int i = 0; i < kRowGroup; ++i)
                if (r0 + i < nrows) v[i] = *reinterpret_cast<const uint2*>(wsm + int64_t(r0 + i) * K + e);
#pragma unroll
            for (int i = 0; i < kRowGroup; ++i)
                if (r0 + i < nrows)
                    acc[i] += bf(v[i].x & 0xffffu) * xv.x + bf(v[i].x >> 16) * xv.y + bf(v[i].y & 0xffffu) * xv.z +
                              bf(v[i].y >> 16) * xv.w;
        }
#pragma unroll
        for (int i = 0; i < kRowGroup; ++i) {
            const float s = warp_sum(acc[i]);
            if (lane == 0 && r0 + i < nrows) dots[r0 + i] = s;
        }
    }
}

struct HeadStats { // this block's running (max, lowest index of the max, Σ exp(v − max)) over its logits
    float m = -FLT_MAX, s = 0.0f;
    int i = 0x7fffffff;
};

// One matrix phase of this block: wait for each chunk, multiply, write the epilogue, refill the slot.
template <int PH>
__device__ void matrix_phase(const PersistArgs& a, int li, Ring& ring, Cursor& cur, const float* xs, float* dots,
                             float* y, HeadStats* hs, float* xres) {
    const Mat m = mat_of(a, ring.layers, li, PH);
    const Span sp = ring.spans->s[PH];
    const int nc = sp.n;
    for (int c = 0; c < nc; ++c) {
        const int si = ring.consumed % kSlots;
        const long long t0 = a.prof && threadIdx.x == 0 ? clock64() : 0;
        mbar_wait(ring.bars + si, uint32_t(ring.consumed / kSlots) & 1u);
        if (a.prof && threadIdx.x == 0) ring.wait_clk += clock64() - t0;
        const int64_t r = sp.r0 + int64_t(c) * sp.cr;
        const int nr = int(lmin(sp.cr, sp.r1 - r));
        chunk_dots(ring.slot(si), PH == kGU ? 2 * nr : nr, m.k, xs, dots);
        __syncthreads();
        const long long t1 = a.prof && threadIdx.x == 0 ? clock64() : 0;
        if (a.prof && threadIdx.x == 0) ring.dots_clk += t1 - t0;
        if constexpr (PH == kHead) {
            if (threadIdx.x < kWarp) { // warp 0 folds this chunk's logits into the running stats
                float cm = -FLT_MAX;
                int ci = 0x7fffffff;
                for (int j = threadIdx.x; j < nr; j += kWarp) {
                    y[r + j] = dots[j];
                    if (dots[j] > cm) cm = dots[j], ci = int(r + j);
                }
                for (int o = 16; o > 0; o >>= 1) {
                    const float om = __shfl_xor_sync(0xffffffffu, cm, o);
                    const int oi = __shfl_xor_sync(0xffffffffu, ci, o);
                    if (om > cm || (om == cm && oi < ci)) cm = om, ci = oi;
                }
                const float nm = fmaxf(hs->m, cm);
                float e = 0.0f;
                for (int j = threadIdx.x; j < nr; j += kWarp) e += expf(dots[j] - nm);
                e = warp_sum(e);
                if (cm > hs->m) hs->i = ci; // ties: the earlier chunk has the lower index
                hs->s = hs->s * expf(hs->m - nm) + e;
                hs->m = nm;
            }
        } else {
            for (int j = threadIdx.x; j < nr; j += kThreads) {
                if constexpr (PH == kQKV) y[r + j] = dots[j];
                else if constexpr (PH == kGU) y[r + j] = silu(dots[j]) * dots[nr + j];
                else { // kO, kDown: the residual rows of this block (the same rows in both phases) live in xres
                    const float v = xres[r - sp.r0 + j] + dots[j];
                    xres[r - sp.r0 + j] = v;
                    __stcg(y + r + j, v);
                }
            }
        }
        __syncthreads(); // the slot and dots are free again
        if (threadIdx.x == 0) {
            const long long t2 = a.prof ? clock64() : 0;
            fence_proxy_async();
            issue(a, ring, cur, si);
            if (a.prof) ring.epi_clk += t2 - t1, ring.issue_clk += clock64() - t2;
        }
        ++ring.consumed;
    }
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 1) k_decode_step(PersistArgs a) {
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ float red[32];
    __shared__ uint64_t bars[kSlots];
    __shared__ float xres[kMaxRows]; // this block's rows of the residual stream x (o and down rows)
    cg::grid_group grid = cg::this_grid();
    const int D = a.D, oK = a.Hq * HD;
    const int xs_n = max(max(D, oK), a.I);
    float* xs = reinterpret_cast<float*>(smem + size_t(kSlots) * a.slot_bytes);
    float* dots = xs + xs_n;
    PersistLayer* layers = reinterpret_cast<PersistLayer*>(dots + max(2 * kMaxRows, 3 * a.Hq * kMaxSplits));
    for (int i = threadIdx.x; i < a.L; i += kThreads) layers[i] = a.layers[i];
    __shared__ Spans spans;
    __syncthreads();
    if (threadIdx.x < kEnd) spans.s[threadIdx.x] = span_of(mat_of(a, layers, 0, threadIdx.x), a.slot_bytes);
    Ring ring{layers, &spans, reinterpret_cast<uint16_t*>(smem), bars, a.slot_bytes};
    __syncthreads();
    Cursor cur;
    if (threadIdx.x == 0) {
        for (int i = 0; i < kSlots; ++i) mbar_init(bars + i);
        mbar_fence_init();
        for (int i = 0; i < kSlots; ++i) issue(a, ring, cur, i);
    }
    __syncthreads();
    // profile (QASR_CUDA_PERSIST_PROFILE=1): block 0 adds the ns of each phase kind to a.prof[kind]
    unsigned long long tp = 0;
    const bool prof = a.prof && blockIdx.x == 0 && threadIdx.x == 0;
    auto mark = [&](int kind) {
        if (!prof) return;
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (kind >= 0) a.prof[kind] += t - tp;
        tp = t;
    };
    mark(-1);

    const int tok = *a.tok;
    HeadStats hs;
    const int pos = *a.pos;
    for (int li = 0; li < a.L; ++li) {
        const PersistLayer& l = layers[li];
        { // this block's attention work of the layer reads cached keys/values 0..pos-1: pull them towards L2 now
            const int row = a.Hkv * HD, lines = HD * 4 / 128;
            for (int b = blockIdx.x; b < a.Hkv * a.splits; b += gridDim.x) {
                const int g = b / a.splits;
                int s0, s1;
                split_keys(pos + 1, a.splits, b % a.splits, s0, s1);
                s1 = min(s1, pos); // position pos is this step's (written in the attention phase)
                for (int i = threadIdx.x; i < (s1 - s0) * lines * 2; i += kThreads) {
                    const int j = s0 + i / (2 * lines), ln = i % lines;
                    const float* base = (i / lines) % 2 ? l.vc : l.kc;
                    prefetch_l2(base + int64_t(j) * row + g * HD + ln * 32);
                }
            }
        }
        if (li == 0) {
            const int64_t r0 = int64_t(D) * blockIdx.x / gridDim.x, r1 = int64_t(D) * (blockIdx.x + 1) / gridDim.x;
            for (int64_t r = r0 + threadIdx.x; r < r1; r += kThreads) xres[r - r0] = bf(a.embed[int64_t(tok) * D + r]);
            stage_embed(a.embed + int64_t(tok) * D, D, l.in_norm, a.eps, a.x, xs, red);
        }
        else stage(a.x, D, l.in_norm, a.eps, xs, red);
        matrix_phase<kQKV>(a, li, ring, cur, xs, dots, a.qkv, nullptr, xres);
        mark(0);
        grid.sync();
        mark(1);
        DecAttnArgs at;
        at.qkv = a.qkv, at.pos = a.pos, at.Hq = a.Hq, at.Hkv = a.Hkv, at.hd = HD;
        at.qn = l.q_norm, at.kn = l.k_norm, at.eps = a.eps, at.inv_freq = a.inv_freq;
        at.kc = l.kc, at.vc = l.vc, at.o = a.attn;
        at.splits = a.splits, at.part = a.part, at.counter = nullptr; // partials; merged by every block below
        if (threadIdx.x < kDecThreads)
            for (int b = blockIdx.x; b < a.Hkv * a.splits; b += gridDim.x) {
                decode_attention_block<HD>(at, b);
                dec_sync();
            }
        mark(2);
        grid.sync();
        mark(3);
        if (a.splits > 1) stage_merge(a, xs, dots);
        else stage(a.attn, oK, nullptr, a.eps, xs, red);
        mark(4);
        matrix_phase<kO>(a, li, ring, cur, xs, dots, a.x, nullptr, xres);
        mark(5);
        grid.sync();
        mark(6);
        stage(a.x, D, l.post_norm, a.eps, xs, red);
        matrix_phase<kGU>(a, li, ring, cur, xs, dots, a.h, nullptr, xres);
        mark(7);
        grid.sync();
        mark(8);
        stage(a.h, a.I, nullptr, a.eps, xs, red);
        matrix_phase<kDown>(a, li, ring, cur, xs, dots, a.x, nullptr, xres);
        mark(9);
        grid.sync();
        mark(10);
    }
    stage(a.x, D, a.norm, a.eps, xs, red);
    matrix_phase<kHead>(a, 0, ring, cur, xs, dots, a.logits, &hs, xres);
    if (threadIdx.x == 0) {
        a.argpart[3 * blockIdx.x] = hs.m;
        a.argpart[3 * blockIdx.x + 1] = __int_as_float(hs.i);
        a.argpart[3 * blockIdx.x + 2] = hs.s;
    }
    mark(11);
    if (prof) a.prof[13] += ring.wait_clk, a.prof[14] += 1, a.prof[15] += ring.dots_clk, a.prof[16] += ring.epi_clk,
              a.prof[17] += ring.issue_clk;
    grid.sync();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    float M = -FLT_MAX;
    int id = 0x7fffffff;
    for (unsigned p = 0; p < gridDim.x; ++p) {
        const float m = __ldcg(a.argpart + 3 * p);
        const int i = __float_as_int(__ldcg(a.argpart + 3 * p + 1));
        if (m > M || (m == M && i < id)) M = m, id = i;
    }
    float S = 0.0f;
    for (unsigned p = 0; p < gridDim.x; ++p) {
        const float s = __ldcg(a.argpart + 3 * p + 2);
        if (s > 0.0f) S += s * expf(__ldcg(a.argpart + 3 * p) - M);
    }
    const bool valid = id != 0x7fffffff; // else every logit NaN: the host rejects −1; the next input is row 0's
    const float lp = valid ? (__ldcg(a.logits + id) - M) - logf(S) : NAN;
    if (a.prof) { // the final barrier and this merge
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        a.prof[12] += t - tp;
    }
    *a.tok = valid ? id : 0;
    const int c = *a.count;
    a.ring[c % a.ring_size] = make_int2(valid ? id : -1, __float_as_int(lp));
    *a.count = c + 1;
    *a.pos += 1;
}

template <int HD> void* step_kernel() { return reinterpret_cast<void*>(&k_decode_step<HD>); }

void* kernel_for(int hd) {
    if (hd == 128) return step_kernel<128>();
    if (hd == 64) return step_kernel<64>();
    if (hd == 256) return step_kernel<256>();
    return nullptr;
}

} // namespace

bool persistent_step_supported(int device, int D, int Hq, int Hkv, int hd, int I) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    // bulk copies need sm_90 and rows of a multiple of 16 bytes
    return major >= 9 && decode_attention_supported(Hq, Hkv, hd) && kernel_for(hd) && D % 8 == 0 && I % 8 == 0 &&
           (Hq * hd) % 8 == 0;
}

PersistLaunch persistent_step_plan(int device, int L, int D, int Hq, int hd, int I) {
    void* k = kernel_for(hd);
    if (!k) fail("cuda", "persistent decode step: unsupported head_dim " + std::to_string(hd));
    int sms = 0, optin = 0, per_sm_smem = 0;
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    QASR_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    QASR_CUDA(cudaDeviceGetAttribute(&per_sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    cudaFuncAttributes fa{};
    QASR_CUDA(cudaFuncGetAttributes(&fa, k));
    // blocks per SM (QASR_CUDA_PERSIST_BPS, default 1): more warps per SM hide more latency, the ring shrinks
    const char* e = std::getenv("QASR_CUDA_PERSIST_BPS");
    const int bps = std::clamp(e ? std::atoi(e) : 1, 1, 8);
    const int64_t grid = int64_t(sms) * bps;
    if ((D + grid - 1) / grid > kMaxRows) fail("cuda", "persistent decode step: too many residual rows per block");
    const size_t xs = size_t(std::max({D, Hq * hd, I})) * 4;
    const size_t dots = size_t(std::max(2 * kMaxRows, 3 * Hq * kMaxSplits)) * 4 + // chunk dots | merge weights
                        size_t(L) * sizeof(PersistLayer);                            // + the layer table
    const size_t budget = std::min<size_t>(size_t(optin), size_t(per_sm_smem) / bps - 1024);
    const size_t fixed = fa.sharedSizeBytes + xs + dots;
    // the widest row must fit a slot twice (a dual gate/up chunk)
    const size_t min_slot = size_t(2) * std::max({D, Hq * hd, I}) * 2;
    if (budget < fixed || (budget - fixed) / kSlots < min_slot)
        fail("cuda", "persistent decode step: rows too wide for the shared-memory ring");
    PersistLaunch p;
    p.slot_bytes = uint32_t(std::min<size_t>((budget - fixed) / kSlots, 64 * 1024) / 16 * 16);
    p.smem = size_t(kSlots) * p.slot_bytes + xs + dots;
    QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(p.smem)));
    int per_sm = 0;
    QASR_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, p.smem));
    if (per_sm < bps) fail("cuda", "persistent decode step: " + std::to_string(bps) + " blocks do not fit on an SM");
    p.grid = int(grid);
    log(LogLevel::Info, "cuda: persistent decode step on " + std::to_string(sms) + " SMs x " + std::to_string(bps) +
                            " blocks, " + std::to_string(kSlots) + " ring slots of " + std::to_string(p.slot_bytes) +
                            " B, " + std::to_string(p.smem) + " B dynamic + " + std::to_string(fa.sharedSizeBytes) +
                            " B static shared memory, " + std::to_string(fa.numRegs) + " registers");
    return p;
}

void persistent_step(const PersistArgs& a, const PersistLaunch& p, cudaStream_t s) {
    void* k = kernel_for(a.hd);
    if (!k) fail("cuda", "persistent decode step: unsupported head_dim " + std::to_string(a.hd));
    if (a.splits < 1 || a.splits > kMaxSplits) fail("cuda", "persistent decode step: key splits must be in [1, 16]");
    PersistArgs args = a;
    args.slot_bytes = p.slot_bytes;
    void* params[] = {&args};
    QASR_CUDA(cudaLaunchCooperativeKernel(k, dim3(unsigned(p.grid)), dim3(kThreads), params, p.smem, s));
}

} // namespace qasr::cuda
