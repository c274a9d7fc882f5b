// The screened greedy head (sm_90, bf16 heads of width 1024/2048): the decode step's greedy choice without reading
// every bf16 row of the LM head, and still the full head's choice.
//
// The head is the step's one large read (0.6B: 151936 × 1024 bf16, 311 MB, ~73 µs of the ~608 µs step on the H200).
// The choice needs the largest logit, not all of them exactly. So the step runs the head's MLX 8-bit copy (the
// proxy, 168 MB) through the quantized streaming head kernel with x̂ rounded to int16 (lm_head_argmax_proxy: integer
// dot products), which stores every proxy logit p_r and the argmax partials; then this file's kernel bounds, per
// row, how far p_r can be from the logit ℓ_r that the bf16 head kernel would compute: |p_r − ℓ_r| ≤ ‖x̂‖·R_r, with
//   R_r = ‖w_r − deq(q_r)‖ + c·(‖|s·q| + |b|‖ + ‖w_r‖) + ‖|s·q| + |b|‖·√K/32000,
// the quantization error (Cauchy–Schwarz), both products' float32 rounding (c = 4(K + 64)·2⁻²⁴, a standard
// dot-product error bound with room for the kernels' differently rounded x̂), and x̂'s rounding (each value within
// 0.504 of a step max|x̂|/16256 in the tensor-core proxy of head_fused.cu, /32767 in the int16 one of lm_head.cu —
// the quotient is taken with a rounded reciprocal — so ≤ √K·‖x̂‖/32254 in norm); computed in double per row when
// the proxy is made, stored rounded up, and scaled by 1.01 for the float32 ‖x̂‖. With p* the largest proxy logit
// (row r*), every row whose upper end p_r + b_r reaches p* − b_r* is rescored with the bf16 weights by
// head_dot_bf16 — the same per-lane arithmetic as the full head — and the largest of those (lowest index on ties) is
// the full head's choice: the full head's winner t has p_t + b_t ≥ ℓ_t ≥ ℓ_r* ≥ p* − b_r*.
// This file's kernels are the three-kernel form (QASR_CUDA_HEAD_FUSED=0); head_fused.cu does the same in one.
// On the random 0.6B checkpoint about one row per step is rescored; where a block's slice has more candidates than
// its list holds it rescores the whole slice (slow, still exact). The log-probability's normaliser Σ exp takes the
// rescored rows' exact logits and the proxy logits of the others.
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/lm_head.cuh"

#include "core/error.hpp"

#include <cfloat>
#include <cmath>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kGroup = 64;                         // the proxy's MLX group size
constexpr int kSThreads = 256, kSWarps = kSThreads / kWarp;
constexpr int kSRowsPerThread = 8;                 // a screen block's slice ≤ 8·256 rows (its bounds in registers)
constexpr int kSCap = 512;                         // candidates a block lists; more → its whole slice is rescored

// One row r of W [V, K] per block, K/8 threads of 8 columns each (8 threads per group of 64): the group's min and
// max, scale = (max − min)/255 rounded up to bf16, bias = min (a bf16 weight, exact), codes = round((w − bias)/scale);
// then the row's bound R_r in double (see the file comment), into bound[r] and the row's padding.
template <int K>
__global__ void __launch_bounds__(K / 8) k_screen_build(const uint16_t* w, uint8_t* packed, float* bound, double c) {
    constexpr int NT = K / 8, NG = K / kGroup, RBP = proxy_row_bytes(K); // codes, scales, biases, bound, padding
    __shared__ double red[3][NT / kWarp];
    const int64_t r = blockIdx.x;
    const int t = threadIdx.x, lane = t % kWarp, warp = t / kWarp;
    const uint4 v = reinterpret_cast<const uint4*>(w + r * K)[t];
    const float f[8] = {bf(v.x & 0xffffu), bf(v.x >> 16), bf(v.y & 0xffffu), bf(v.y >> 16),
                        bf(v.z & 0xffffu), bf(v.z >> 16), bf(v.w & 0xffffu), bf(v.w >> 16)};
    float mn = f[0], mx = f[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) mn = fminf(mn, f[i]), mx = fmaxf(mx, f[i]);
#pragma unroll
    for (int o = 1; o < kGroup / 8; o <<= 1) {
        mn = fminf(mn, __shfl_xor_sync(0xffffffffu, mn, o));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    }
    const uint16_t sb = __bfloat16_as_ushort(__float2bfloat16_ru((mx - mn) / 255.0f));
    const uint16_t bb = __bfloat16_as_ushort(__float2bfloat16_rn(mn));
    const float s = bf(sb), b = bf(bb);
    uint32_t q4[2] = {0, 0};
    double e2 = 0, a2 = 0, w2 = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float q = s > 0.0f ? fminf(fmaxf(rintf((f[i] - b) / s), 0.0f), 255.0f) : 0.0f;
        q4[i / 4] |= uint32_t(q) << ((i % 4) * 8);
        const double d = double(s) * double(q) + double(b); // exact: an 8-bit significand times ≤ 255, plus a bf16
        const double e = double(f[i]) - d, a = fabs(double(s) * double(q)) + fabs(double(b));
        e2 += e * e, a2 += a * a, w2 += double(f[i]) * double(f[i]);
    }
    uint8_t* row = packed + r * RBP;
    reinterpret_cast<uint2*>(row)[t] = make_uint2(q4[0], q4[1]);
    if (t % (kGroup / 8) == 0) {
        uint16_t* sc = reinterpret_cast<uint16_t*>(row + K);
        sc[t / 8] = sb, sc[NG + t / 8] = bb;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        e2 += __shfl_xor_sync(0xffffffffu, e2, o);
        a2 += __shfl_xor_sync(0xffffffffu, a2, o);
        w2 += __shfl_xor_sync(0xffffffffu, w2, o);
    }
    if (lane == 0) red[0][warp] = e2, red[1][warp] = a2, red[2][warp] = w2;
    __syncthreads();
    if (t != 0) return;
    double E = 0, A = 0, W = 0;
    for (int i = 0; i < NT / kWarp; ++i) E += red[0][i], A += red[1][i], W += red[2][i];
    const double R = (sqrt(E) + c * (sqrt(A) + sqrt(W)) + sqrt(A) * sqrt(double(K)) / 32000.0) * (1.0 + 1e-9);
    const float Rf = R < 1e30 ? __double2float_ru(R) : INFINITY; // a non-finite row is always a candidate
    bound[r] = Rf;
    reinterpret_cast<float4*>(row + K + 4 * NG)[0] = make_float4(Rf, 0.0f, 0.0f, 0.0f);
}

struct ScreenArgs {
    int64_t V;
    const float* x;
    const float* norm_w;
    float eps;
    const uint16_t* w;   // the bf16 head
    const float* plog;   // proxy logits [V]
    const float* part;   // the proxy head's (max, index, Σ exp) partials
    int nparts;
    const float* bound;  // R [V]
    float* xpart;        // out: (exact logit, index, Σ exp correction) per block
    unsigned* stats;
    float scale;
};

// A block per slice of rows: the threshold p* − b_r* (the proxy partials merged by warp 0), its rows' candidates
// listed, each rescored by one warp with the bf16 head's arithmetic, the block's best (logit, lowest index) out with
// what the rescored rows' exact logits change in the normaliser (Σ exp(ℓ − p*) − exp(p − p*)).
template <int KC>
__global__ void __launch_bounds__(kSThreads) k_head_screen(ScreenArgs a) {
    constexpr int K = KC * 256;
    __shared__ __align__(16) float xs[K], gsm[K];
    __shared__ int cand[kSCap];
    __shared__ float candp[kSCap];
    __shared__ int ncand, pok;
    __shared__ float pmax, pbound;
    __shared__ float wv[kSWarps], wc[kSWarps];
    __shared__ int wi[kSWarps];
    QASR_TL_ENTRY
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t r0 = a.V * blockIdx.x / gridDim.x, r1 = a.V * (blockIdx.x + 1) / gridDim.x;
    float rb[kSRowsPerThread]; // the slice's bounds (weights-derived: before the wait)
#pragma unroll
    for (int k = 0; k < kSRowsPerThread; ++k) {
        const int64_t r = r0 + threadIdx.x + int64_t(k) * kSThreads;
        rb[k] = r < r1 ? __ldg(a.bound + r) : 0.0f;
    }
    if (threadIdx.x == 0) ncand = 0;
    if (a.norm_w)
        for (int i = threadIdx.x; i < K / 4; i += kSThreads)
            reinterpret_cast<float4*>(gsm)[i] = __ldg(reinterpret_cast<const float4*>(a.norm_w) + i);
    dep_wait();
    QASR_TL_WAITED(kTlArgPart, false);
    dep_launch();
    float p[kSRowsPerThread];
#pragma unroll
    for (int k = 0; k < kSRowsPerThread; ++k) {
        const int64_t r = r0 + threadIdx.x + int64_t(k) * kSThreads;
        p[k] = r < r1 ? __ldcg(a.plog + r) : 0.0f;
    }
    for (int i = threadIdx.x; i < K / 4; i += kSThreads)
        reinterpret_cast<float4*>(xs)[i] = __ldcg(reinterpret_cast<const float4*>(a.x) + i);
    if (warp == 0) {
        float M;
        int I;
        merge_max_parts(a.part, a.nparts, 3, lane, M, I);
        if (lane == 0) {
            pok = I >= 0 && I < a.V; // else no finite maximum: every row is a candidate
            pmax = M;
            pbound = pok ? __ldg(a.bound + I) : 0.0f;
        }
    }
    __syncthreads();
    float xv[KC * 8];
    head_x_bf16<KC>(xs, a.norm_w ? gsm : nullptr, a.eps, lane, xv);
    float n2 = 0.0f;
#pragma unroll
    for (int i = 0; i < KC * 8; ++i) n2 = __fmaf_rn(xv[i], xv[i], n2);
    const float nx = a.scale * sqrtf(warp_sum(n2)); // the same in every warp
    const float T = pok ? pmax - nx * pbound : -INFINITY;
#pragma unroll
    for (int k = 0; k < kSRowsPerThread; ++k) {
        const int64_t r = r0 + threadIdx.x + int64_t(k) * kSThreads;
        if (r < r1 && !(p[k] + nx * rb[k] < T)) { // NaN → candidate
            const int slot = atomicAdd(&ncand, 1);
            if (slot < kSCap) cand[slot] = int(r), candp[slot] = p[k];
        }
    }
    __syncthreads();
    const int n = ncand;
    const int total = n > kSCap ? int(r1 - r0) : n;
    float bv = -FLT_MAX, corr = 0.0f; // corr: Σ exp(ℓ − p*) − exp(p − p*) over the rescored rows
    int bi = 0x7fffffff;
    for (int c = warp; c < total; c += kSWarps) {
        const int r = n > kSCap ? int(r0) + c : cand[c];
        const float v = warp_sum(head_dot_bf16<KC>(reinterpret_cast<const uint4*>(a.w + int64_t(r) * K), lane, xv));
        if (v > bv || (v == bv && r < bi)) bv = v, bi = r;
        corr += expf(v - pmax) - expf((n > kSCap ? __ldcg(a.plog + r) : candp[c]) - pmax);
    }
    if (lane == 0) wv[warp] = bv, wi[warp] = bi, wc[warp] = corr;
    __syncthreads();
    if (threadIdx.x != 0) return;
    for (int w = 1; w < kSWarps; ++w) {
        if (wv[w] > bv || (wv[w] == bv && wi[w] < bi)) bv = wv[w], bi = wi[w];
        corr += wc[w];
    }
    a.xpart[3 * blockIdx.x] = bv;
    a.xpart[3 * blockIdx.x + 1] = __int_as_float(bi);
    a.xpart[3 * blockIdx.x + 2] = pok ? corr : 0.0f;
    if (a.stats) atomicAdd(a.stats, unsigned(n));
}

bool sm90(int* sms) {
    int dev = 0, major = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (sms) QASR_CUDA(cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev));
    return major >= 9;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

} // namespace

QASR_TL_BIND(timeline_bind_screen)

HeadScreen build_head_screen(const DMat& W, std::vector<Buffer>& storage, size_t& bytes) {
    HeadScreen h;
    if (W.bits != 16 || (W.cols != 1024 && W.cols != 2048) || W.rows < 1 || W.rows > INT32_MAX / 2 || !aligned16(W.data) ||
        !sm90(nullptr))
        return h;
    const int64_t V = W.rows, K = W.cols;
    Buffer packed(size_t(V) * proxy_row_bytes(int(K))), bd(size_t(V) * 4);
    const double c = 4.0 * double(K + 64) * std::ldexp(1.0, -24);
    const auto* w = static_cast<const uint16_t*>(W.data);
    if (K == 1024)
        k_screen_build<1024><<<unsigned(V), 128>>>(w, packed.as<uint8_t>(), bd.as<float>(), c);
    else
        k_screen_build<2048><<<unsigned(V), 256>>>(w, packed.as<uint8_t>(), bd.as<float>(), c);
    QASR_CUDA_LAUNCHED();
    QASR_CUDA(cudaDeviceSynchronize());
    h.proxy.bits = 8, h.proxy.rows = V, h.proxy.cols = K, h.proxy.gs = kGroup;
    h.proxy.data = packed.get(); // scales and biases inside the rows (lm_head_argmax_proxy)
    h.bound = bd.as<float>();
    bytes += packed.size() + bd.size();
    storage.push_back(std::move(packed));
    storage.push_back(std::move(bd));
    return h;
}

int screened_head_argmax(const DMat& W, const HeadScreen& hs, const float* x, const float* norm_w, float eps, float* plog,
                         float* part, int max_parts, int* nparts, float* xpart, int max_x, unsigned* stats, cudaStream_t s,
                         float bound_scale) {
    if (!hs || W.bits != 16 || hs.proxy.rows != W.rows || hs.proxy.cols != W.cols || !aligned16(x) ||
        (norm_w && !aligned16(norm_w)) || !pdl_enabled())
        return 0;
    const int KC = int(W.cols / 256);
    int sms = 0;
    if ((KC != 4 && KC != 8) || !sm90(&sms)) return 0;
    const int64_t per = int64_t(kSRowsPerThread) * kSThreads;
    const int grid = int(std::max<int64_t>(sms, (W.rows + per - 1) / per));
    if (grid > max_x) return 0;
    const int np = lm_head_argmax_proxy(hs.proxy, x, norm_w, eps, plog, part, max_parts, s);
    if (!np) return 0;
    ScreenArgs a{W.rows, x, norm_w, eps, static_cast<const uint16_t*>(W.data), plog, part, np, hs.bound, xpart, stats,
                 bound_scale};
    if (KC == 4) launch(k_head_screen<4>, dim3(unsigned(grid)), dim3(kSThreads), 0, s, a);
    else launch(k_head_screen<8>, dim3(unsigned(grid)), dim3(kSThreads), 0, s, a);
    QASR_CUDA_LAUNCHED();
    *nparts = np;
    return grid;
}

} // namespace qasr::cuda
