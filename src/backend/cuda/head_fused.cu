// The screened greedy head as one kernel (sm_90): the proxy on the tensor cores, and the screen, the rescoring and
// the greedy merge in the tail of the last block to finish.
//
// Why: the three-kernel screened head (proxy, screen, merge; head_screen.cu) is ~60 µs of the 0.6B step, and its
// proxy kernel ran at ~3.3 TB/s, issue-bound (~120 instructions per row: integer dot products per 4 codes, a warp
// reduction per row), with two more kernel boundaries after it. Here a warp takes 16 rows at a time through
// mma.m16n8k32 (unsigned codes × signed bytes): x̂ is rounded to steps of max|x̂|/16256 and split into a·128 + b
// with a, b signed bytes, held as the B operand's columns 0 and 1, so one mma gives both partial sums of 16 rows over
// 32 columns, exact in int32; a group's (64 columns) sum is then scale·sx·(128·Σqa + Σqb) + bias·Σx̂. About 25
// instructions per row; the kernel streams the proxy (each warp its own ring of 16-row slots, bulk copies on
// mbarriers, the first issued before the dependency wait).
//
// The screen needs every row's proxy logit p_r and bound b_r (stored in the row's padding) only through two numbers
// per block: the largest lower end p_r − n·b_r (the best lower bound of the winner's logit) and the two largest
// upper ends p_r + n·b_r with the row of the largest. The full head's winner t has p_t + n·b_t ≥ ℓ_t ≥ every lower
// end, so only a block whose largest upper end reaches the largest lower end T (over all blocks) can hold it, and if
// its second largest is below T the row of its largest is the only candidate; otherwise the last block screens that
// block's rows from their stored proxy logits and the bound array (and where more rows qualify than its list holds,
// rescores the slices whole: slow, still exact). The last block (an arrival count) rescores the candidates with the
// bf16 rows through the full head's arithmetic (head_dot_bf16), picks the largest (lowest index on ties), and writes
// the token, the ring slot, the counters and the next step's input row as k_argmax_final does; the log-probability's
// normaliser takes the proxy logits, corrected for the rescored rows. (Asking L2 for the next step's first product's
// weights from the tail, while HBM is otherwise idle, made the step 29 µs slower: not done.)
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lm_head.cuh"

#include "core/error.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cstdlib>
#include <string>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kFWarps = 4, kFThreads = kFWarps * kWarp;
constexpr int kTile = 16;           // rows per mma tile (and per ring slot)
constexpr int kFMaxSlots = 4;       // ring slots per warp
constexpr int kRec = 8;             // floats per block record
constexpr float kXSteps = 16256.0f; // x̂ → q = a·128 + b, |q| ≤ 127·128

struct FusedArgs {
    int64_t V;
    const float* x;
    const float* norm_w;
    float eps;
    const uint8_t* proxy; // packed rows (head_screen.cu): codes [K], scales [NG], biases [NG] (bf16), bound (f32), pad
    const uint16_t* w;    // the bf16 head [V, K]
    float* plog;          // out: proxy logits [V]
    float* rec;           // block records [kRec · grid]
    unsigned* counter;    // arrivals; wraps to 0 at the last block
    int* tok;
    int* pos;
    int* count;
    int2* ring;
    int ring_size;
    int advance;
    const uint16_t* emb; // bf16 [*, emb_cols] or null
    int emb_cols;
    float* emb_out;
    unsigned* stats;
    float scale;        // the bound's factor (1.01; 0 in a test)
    int slots;          // ring slots per warp
    const float* bound; // R [V] (the rows' bounds as a plain array: the tail's scan of a slice)
};

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t (&a)[4]) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}
__device__ __forceinline__ void mma_u8s8(int (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// Lane state: the running greedy partial (max, lowest index, Σ exp) and the screen's ends.
struct Run {
    float m, sum;
    int id;
    float lb;     // largest lower end
    float u1, p1; // largest upper end, its row's proxy logit
    int r1;
    float u2; // second largest upper end
};
__device__ __forceinline__ Run run_empty() {
    return Run{-FLT_MAX, 0.0f, INT_MAX, -INFINITY, -INFINITY, 0.0f, INT_MAX, -INFINITY};
}

// The row's ends p ∓ n·b, spelled as fused multiply-adds: the tail's scan computes the same floats.
__device__ __forceinline__ float upper_end(float p, float n, float b) {
    return __fmaf_rn(n, b, p);
}
__device__ __forceinline__ void run_take(Run& s, float p, float n, float b, int r) {
    if (p > s.m)
        s.sum = s.sum * expf(s.m - p) + 1.0f, s.m = p, s.id = r;
    else
        s.sum += expf(p - s.m);
    s.lb = fmaxf(s.lb, __fmaf_rn(-n, b, p));
    float u = upper_end(p, n, b);
    if (u != u) u = INFINITY; // a NaN end is a candidate
    if (u > s.u1)
        s.u2 = s.u1, s.u1 = u, s.r1 = r, s.p1 = p;
    else if (u > s.u2)
        s.u2 = u;
}

// Symmetric merge (both sides of a butterfly get the same result).
__device__ __forceinline__ void run_merge(Run& s, const Run& o) {
    const float M = fmaxf(s.m, o.m);
    const float sum = (s.sum > 0.0f ? s.sum * expf(s.m - M) : 0.0f) + (o.sum > 0.0f ? o.sum * expf(o.m - M) : 0.0f);
    if (o.m > s.m || (o.m == s.m && o.id < s.id)) s.id = o.id;
    s.m = M, s.sum = sum;
    s.lb = fmaxf(s.lb, o.lb);
    if (o.u1 > s.u1 || (o.u1 == s.u1 && o.r1 < s.r1)) {
        s.u2 = fmaxf(s.u1, o.u2);
        s.u1 = o.u1, s.r1 = o.r1, s.p1 = o.p1;
    } else {
        s.u2 = fmaxf(s.u2, o.u1);
    }
}

__device__ __forceinline__ Run run_shfl(const Run& s, int o) {
    Run t = s;
    t.m = __shfl_xor_sync(0xffffffffu, s.m, o), t.sum = __shfl_xor_sync(0xffffffffu, s.sum, o);
    t.id = __shfl_xor_sync(0xffffffffu, s.id, o), t.lb = __shfl_xor_sync(0xffffffffu, s.lb, o);
    t.u1 = __shfl_xor_sync(0xffffffffu, s.u1, o), t.p1 = __shfl_xor_sync(0xffffffffu, s.p1, o);
    t.r1 = __shfl_xor_sync(0xffffffffu, s.r1, o), t.u2 = __shfl_xor_sync(0xffffffffu, s.u2, o);
    return t;
}

template <int K> __global__ void __launch_bounds__(kFThreads, 1) k_head_fused(FusedArgs a) {
    constexpr int NG = K / 64, KS = K / 32, RBP = K + 4 * NG + 16, E = K / kFThreads, KC = K / 256;
    static_assert(E % 8 == 0 && 64 % E == 0, "a thread's columns lie in one group");
    extern __shared__ __align__(128) uint8_t ring[];
    __shared__ __align__(8) uint64_t full[kFWarps * kFMaxSlots];
    __shared__ __align__(16) float xs[K], gsm[K];
    __shared__ __align__(16) uint2 xab[2 * KS * 4]; // B fragments: [column (a, b)][k step][thread in group]
    __shared__ float xsg[NG];                       // Σ x̂ per group
    __shared__ float red[kFWarps * 3];
    __shared__ Run wrun[kFWarps];
    __shared__ int last, ncand, novf, fin_id;
    __shared__ float fin_x, fin_c, fin_m, fin_t;
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g8 = lane >> 2, tig = lane & 3;
    const int G = int(gridDim.x);
    const int64_t ntiles = (a.V + kTile - 1) / kTile;
    const int64_t t0 = ntiles * blockIdx.x / G, t1 = ntiles * (blockIdx.x + 1) / G;
    const int nw = t1 - t0 > warp ? int((t1 - t0 - warp + kFWarps - 1) / kFWarps) : 0; // this warp's tiles
    uint8_t* wring = ring + size_t(warp) * a.slots * kTile * RBP;
    uint64_t* wbar = full + warp * kFMaxSlots;
    auto issue = [&](int i) { // lane 0: the warp's tile i into slot i % slots
        const int64_t r = (t0 + warp + int64_t(i) * kFWarps) * kTile;
        const uint32_t bytes = uint32_t(min(int64_t(kTile), a.V - r)) * RBP;
        uint64_t* bar = wbar + i % a.slots;
        mbar_expect(bar, bytes);
        bulk_copy(wring + size_t(i % a.slots) * kTile * RBP, a.proxy + r * RBP, bytes, bar);
    };
    // before the dependency wait: the rows' first slots and the norm weights (neither depends on the step)
    if (lane == 0) {
        for (int i = 0; i < a.slots; ++i)
            mbar_init(&wbar[i]);
        mbar_fence_init();
        for (int i = 0; i < a.slots && i < nw; ++i)
            issue(i);
    }
    if (a.norm_w)
        for (int i = threadIdx.x; i < K / 4; i += kFThreads)
            reinterpret_cast<float4*>(gsm)[i] = __ldg(reinterpret_cast<const float4*>(a.norm_w) + i);
    dep_wait();
    dep_launch();
    for (int i = threadIdx.x; i < K / 4; i += kFThreads)
        reinterpret_cast<float4*>(xs)[i] = __ldcg(reinterpret_cast<const float4*>(a.x) + i);
    __syncthreads();
    // x̂ = RMSNorm(x)·w over this thread's E columns; its sum of squares, max |x̂| and group sums over the block
    const int c0 = threadIdx.x * E;
    float xh[E];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i)
        xh[i] = xs[c0 + i], ss = fmaf(xh[i], xh[i], ss);
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    float tot = 0.0f;
#pragma unroll
    for (int w = 0; w < kFWarps; ++w)
        tot += red[w];
    const float inv = a.norm_w ? rsqrtf(tot / float(K) + a.eps) : 1.0f;
    float am = 0.0f, n2 = 0.0f, gsum = 0.0f;
#pragma unroll
    for (int i = 0; i < E; ++i) {
        if (a.norm_w) xh[i] = xh[i] * inv * gsm[c0 + i];
        am = fmaxf(am, fabsf(xh[i])), n2 = fmaf(xh[i], xh[i], n2), gsum += xh[i];
    }
#pragma unroll
    for (int o = 1; o < 64 / E; o <<= 1)
        gsum += __shfl_xor_sync(0xffffffffu, gsum, o);
    if ((threadIdx.x % (64 / E)) == 0) xsg[c0 / 64] = gsum;
    am = warp_max(am), n2 = warp_sum(n2);
    __syncthreads(); // red reused
    if (lane == 0) red[kFWarps + warp] = am, red[2 * kFWarps + warp] = n2;
    __syncthreads();
    float amax = 0.0f, nn = 0.0f;
#pragma unroll
    for (int w = 0; w < kFWarps; ++w)
        amax = fmaxf(amax, red[kFWarps + w]), nn += red[2 * kFWarps + w];
    if (!(amax < INFINITY)) amax = 0.0f; // non-finite x̂: every logit is NaN, found by the rescoring
    const float sx = amax > 0.0f ? amax / kXSteps : 1.0f, rx = 1.0f / sx; // |x̂ − sx·q| ≤ 0.504·sx
    const float nb = a.scale * sqrtf(nn);
    {
        uint8_t* xb8 = reinterpret_cast<uint8_t*>(xab);
#pragma unroll
        for (int i = 0; i < E; ++i) {
            const int k = c0 + i, s = k / 32, kk = k % 32, t = (kk % 16) / 4, byte = (kk < 16 ? 0 : 4) + kk % 4;
            const int q = max(-16256, min(16256, __float2int_rn(xh[i] * rx)));
            const int hi = (q + 64) >> 7, lo = q - hi * 128;
            xb8[(size_t(s) * 4 + t) * 8 + byte] = uint8_t(int8_t(hi));
            xb8[(size_t(KS + s) * 4 + t) * 8 + byte] = uint8_t(int8_t(lo));
        }
    }
    __syncthreads();
    // the warp's tiles: 16 rows × 64 columns per group, two mma each; lanes with tig 0 hold rows g8 and g8 + 8
    Run st = run_empty();
    const uint32_t abase = smem_addr(wring) + uint32_t(((lane & 7) + 8 * ((lane >> 3) & 1)) * RBP + 16 * (lane >> 4));
    const uint2* bsrc = xab + (g8 == 1 ? KS * 4 : 0) + tig;
    const bool bl = lane < 8;
    uint32_t phase = 0;
    int slot = 0;
    for (int i = 0; i < nw; ++i) {
        mbar_wait(&wbar[slot], phase);
        const uint32_t sa = abase + uint32_t(slot * kTile * RBP);
        const uint8_t* rowA = wring + size_t(slot) * kTile * RBP + g8 * RBP;
        const uint8_t* rowB = rowA + 8 * RBP;
        float pA = 0.0f, pB = 0.0f;
#pragma unroll 4
        for (int g = 0; g < NG; ++g) {
            int d[4] = {0, 0, 0, 0};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int s = 2 * g + h;
                uint32_t af[4];
                ldsm_x4(sa + 32 * s, af);
                const uint2 bv = bl ? bsrc[s * 4] : make_uint2(0u, 0u);
                mma_u8s8(d, af, bv.x, bv.y);
            }
            const uint16_t* scA = reinterpret_cast<const uint16_t*>(rowA + K);
            const uint16_t* scB = reinterpret_cast<const uint16_t*>(rowB + K);
            const float xg = xsg[g];
            pA = fmaf(bf(scA[g]), sx * float(d[0] * 128 + d[1]), fmaf(bf(scA[NG + g]), xg, pA));
            pB = fmaf(bf(scB[g]), sx * float(d[2] * 128 + d[3]), fmaf(bf(scB[NG + g]), xg, pB));
        }
        const float bA = *reinterpret_cast<const float*>(rowA + K + 4 * NG);
        const float bB = *reinterpret_cast<const float*>(rowB + K + 4 * NG);
        __syncwarp(); // the slot is read: refill it (generic-proxy reads ordered before the bulk writes)
        if (lane == 0 && i + a.slots < nw) {
            fence_proxy_async();
            issue(i + a.slots);
        }
        if (++slot == a.slots) slot = 0, phase ^= 1u;
        if (tig == 0) {
            const int64_t r = (t0 + warp + int64_t(i) * kFWarps) * kTile + g8;
            if (r < a.V) a.plog[r] = pA, run_take(st, pA, nb, bA, int(r));
            if (r + 8 < a.V) a.plog[r + 8] = pB, run_take(st, pB, nb, bB, int(r + 8));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        run_merge(st, run_shfl(st, o));
    if (lane == 0) wrun[warp] = st;
    __threadfence(); // this thread's proxy logits, before the arrival below
    __syncthreads();
    if (threadIdx.x == 0) {
        Run b = wrun[0];
        for (int w = 1; w < kFWarps; ++w)
            run_merge(b, wrun[w]);
        float4* r = reinterpret_cast<float4*>(a.rec + size_t(kRec) * blockIdx.x);
        r[0] = make_float4(b.m, __int_as_float(b.id), b.sum, b.lb);
        r[1] = make_float4(b.u1, __int_as_float(b.r1), b.p1, b.u2);
        __threadfence();
        last = atomicInc(a.counter, unsigned(G - 1)) == unsigned(G - 1);
    }
    __syncthreads();
    if (!last) return;
    // ---- the last block: screen, rescore, choose ----
    __threadfence();
    float* srec = reinterpret_cast<float*>(ring); // the ring is free now
    int* ovf = reinterpret_cast<int*>(srec + size_t(kRec) * G);
    int* candr = ovf + G;
    const int cap = int((size_t(a.slots) * kFWarps * kTile * RBP - size_t(G) * (kRec + 1) * 4) / 8);
    float* candp = reinterpret_cast<float*>(candr + cap);
    for (int i = threadIdx.x; i < 2 * G; i += kFThreads)
        reinterpret_cast<float4*>(srec)[i] = __ldcg(reinterpret_cast<const float4*>(a.rec) + i);
    if (threadIdx.x == 0) ncand = 0, novf = 0;
    __syncthreads();
    float M = -FLT_MAX, S = 0.0f, T = -INFINITY;
    int I = INT_MAX;
    if (warp == 0) {
        for (int p = lane; p < G; p += kWarp) {
            const float m = srec[kRec * p];
            const int id = __float_as_int(srec[kRec * p + 1]);
            if (m > M || (m == M && id < I)) M = m, I = id;
            T = fmaxf(T, srec[kRec * p + 3]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float om = __shfl_xor_sync(0xffffffffu, M, o);
            const int oi = __shfl_xor_sync(0xffffffffu, I, o);
            if (om > M || (om == M && oi < I)) M = om, I = oi;
            T = fmaxf(T, __shfl_xor_sync(0xffffffffu, T, o));
        }
        if (!(I >= 0 && I < a.V)) T = -INFINITY; // no finite maximum: every row is a candidate
        for (int p = lane; p < G; p += kWarp) {
            const float s = srec[kRec * p + 2];
            if (s > 0.0f) S += s * expf(srec[kRec * p] - M);
            if (!(srec[kRec * p + 4] >= T)) continue;
            if (srec[kRec * p + 7] >= T)
                ovf[atomicAdd(&novf, 1)] = p; // more than one row reaches T: scanned below
            else {
                const int c = atomicAdd(&ncand, 1);
                candr[c] = __float_as_int(srec[kRec * p + 5]), candp[c] = srec[kRec * p + 6];
            }
        }
        S = warp_sum(S);
        if (lane == 0) fin_m = M, fin_t = T;
    }
    __syncthreads();
    M = fin_m, T = fin_t;
    const int nrec = ncand, no = novf;
    // a block with more than one row at the threshold: its rows' ends from the proxy logits and the bounds
    for (int o = 0; o < no; ++o) {
        const int p = ovf[o];
        const int64_t r0 = (ntiles * p / G) * kTile, r1 = min(a.V, (ntiles * (p + 1) / G) * kTile);
        for (int64_t r = r0 + threadIdx.x; r < r1; r += kFThreads) {
            const float pr = __ldcg(a.plog + r);
            if (!(upper_end(pr, nb, __ldg(a.bound + r)) < T)) { // NaN → candidate
                const int c = atomicAdd(&ncand, 1);
                if (c < cap) candr[c] = int(r), candp[c] = pr;
            }
        }
    }
    __syncthreads();
    const bool full_scan = ncand > cap; // more candidates than the list holds: the overflowing slices whole
    const int nc = full_scan ? nrec : ncand;
    // the likely token's embedding row in flight while the candidates are rescored
    constexpr int EV = 2; // uint4 per thread: rows of ≤ 2048 bf16
    uint4 ev[EV];
    const int spec = nc > 0 ? candr[0] : 0;
    const int nev = a.emb ? a.emb_cols / 8 : 0;
#pragma unroll
    for (int j = 0; j < EV; ++j) {
        const int c = threadIdx.x + j * kFThreads;
        if (c < nev) ev[j] = __ldg(reinterpret_cast<const uint4*>(a.emb + int64_t(spec) * a.emb_cols) + c);
    }
    float xv[KC * 8];
    head_x_bf16<KC>(xs, a.norm_w ? gsm : nullptr, a.eps, lane, xv);
    float bv = -FLT_MAX, corr = 0.0f;
    int bi = INT_MAX;
    unsigned listed = 0;
    auto rescore = [&](int r, float p) {
        const float v = warp_sum(head_dot_bf16<KC>(reinterpret_cast<const uint4*>(a.w + int64_t(r) * K), lane, xv));
        if (v > bv || (v == bv && r < bi)) bv = v, bi = r;
        corr += expf(v - M) - expf(p - M);
    };
    for (int c = warp; c < nc; c += kFWarps)
        rescore(candr[c], candp[c]);
    listed += nc;
    for (int o = 0; full_scan && o < no; ++o) {
        const int p = ovf[o];
        const int64_t r0 = (ntiles * p / G) * kTile, r1 = min(a.V, (ntiles * (p + 1) / G) * kTile);
        for (int64_t r = r0 + warp; r < r1; r += kFWarps)
            rescore(int(r), __ldcg(a.plog + r));
        listed += unsigned(r1 - r0);
    }
    if (lane == 0) wrun[warp].m = bv, wrun[warp].id = bi, wrun[warp].sum = corr;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kFWarps; ++w) {
            if (wrun[w].m > bv || (wrun[w].m == bv && wrun[w].id < bi)) bv = wrun[w].m, bi = wrun[w].id;
            corr += wrun[w].sum;
        }
        fin_id = bi, fin_x = bv, fin_c = corr;
        if (a.stats) atomicAdd(a.stats, listed);
    }
    __syncthreads();
    const int id = fin_id;
    const bool valid = id != INT_MAX;
    if (a.emb_out) { // the next step's input: the chosen row (row 0 when there is none; discarded)
        const int row = valid ? id : 0;
#pragma unroll
        for (int j = 0; j < EV; ++j) {
            const int c = threadIdx.x + j * kFThreads;
            if (c >= nev) break;
            const uint4 v =
                row == spec ? ev[j] : __ldg(reinterpret_cast<const uint4*>(a.emb + int64_t(row) * a.emb_cols) + c);
            float4* o = reinterpret_cast<float4*>(a.emb_out) + 2 * c;
            o[0] = make_float4(bf(v.x & 0xffffu), bf(v.x >> 16), bf(v.y & 0xffffu), bf(v.y >> 16));
            o[1] = make_float4(bf(v.z & 0xffffu), bf(v.z >> 16), bf(v.w & 0xffffu), bf(v.w >> 16));
        }
    }
    if (threadIdx.x != 0) return;
    S = S + fin_c; // thread 0 is warp 0's lane 0: it holds the proxy normaliser
    const float lp = valid ? (fin_x - M) - logf(S) : NAN;
    *a.tok = valid ? id : 0;
    const int c = *a.count;
    a.ring[c % a.ring_size] = make_int2(valid ? id : -1, __float_as_int(lp));
    *a.count = c + 1;
    if (a.advance) *a.pos += 1;
}

bool g_fused_on = [] { // QASR_CUDA_HEAD_FUSED=0: the three-kernel screened head (A/B)
    const char* e = std::getenv("QASR_CUDA_HEAD_FUSED");
    return !(e && std::string(e) == "0");
}();

} // namespace

bool screened_head_choose(const DMat& W, const HeadScreen& hs, const float* x, const float* norm_w, float eps,
                          float* plog, float* rec, int max_rec, unsigned* counter, int* tok, int* pos, int* count,
                          int2* ring, int ring_size, bool advance, const DMat* emb, float* emb_out, unsigned* stats,
                          cudaStream_t s, float bound_scale) {
    if (!g_fused_on || !hs || W.bits != 16 || hs.proxy.rows != W.rows || hs.proxy.cols != W.cols || !pdl_enabled())
        return false;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(x) || (norm_w && !aligned(norm_w)) || !aligned(rec) || !aligned(hs.proxy.data)) return false;
    if (emb && (!argmax_can_embed(*emb) || !emb_out || !aligned(emb_out))) return false;
    const int64_t K = W.cols;
    if (K != 1024 && K != 2048) return false;
    int dev = 0, major = 0, sms = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (major < 9 || sms < 1 || sms > max_rec) return false;
    const size_t rbp = size_t(K + 4 * (K / 64) + 16);
    // ring slots per warp (QASR_CUDA_HEAD_SLOTS, A/B): as many as ~150 KB of shared memory hold, ≥ 1
    static const int env_slots = [] {
        const char* e = std::getenv("QASR_CUDA_HEAD_SLOTS");
        return e ? std::clamp(std::atoi(e), 1, kFMaxSlots) : 0;
    }();
    int slots = env_slots ? env_slots : int(std::max<size_t>(1, (150 * 1024) / (size_t(kFWarps) * kTile * rbp)));
    slots = std::min(slots, kFMaxSlots);
    while (slots > 1 && size_t(kFWarps) * slots * kTile * rbp > 200 * 1024)
        --slots;
    const size_t smem = size_t(kFWarps) * slots * kTile * rbp;
    if (size_t(sms) * (kRec + 1) * 4 + size_t(sms) * 8 > smem) return false; // the tail's scratch reuses the ring
    FusedArgs a{W.rows,
                x,
                norm_w,
                eps,
                static_cast<const uint8_t*>(hs.proxy.data),
                static_cast<const uint16_t*>(W.data),
                plog,
                rec,
                counter,
                tok,
                pos,
                count,
                ring,
                ring_size,
                advance ? 1 : 0,
                emb ? static_cast<const uint16_t*>(emb->data) : nullptr,
                emb ? int(emb->cols) : 0,
                emb ? emb_out : nullptr,
                stats,
                bound_scale,
                slots,
                hs.bound};
    auto go = [&](auto k) {
        QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
        launch(k, dim3(unsigned(sms)), dim3(kFThreads), smem, s, a);
    };
    if (K == 1024)
        go(k_head_fused<1024>);
    else
        go(k_head_fused<2048>);
    QASR_CUDA_LAUNCHED();
    return true;
}

} // namespace qasr::cuda
