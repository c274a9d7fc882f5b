// The bf16 LM head's per-lane arithmetic, shared by the streaming head (lm_head.cu) and the screened head's
// rescoring (head_screen.cu): both must produce the same float for a row, bit for bit, so that the screened greedy
// choice is the full head's. The operations are spelled out (explicit fused multiply-adds) rather than left to the
// compiler's contraction, which may differ between kernels.
#pragma once
#include "backend/cuda/device_util.cuh"

#include <cfloat>

namespace qasr::cuda::detail {

// The screened head's proxy rows (head_screen.cu builds them): K 8-bit codes, K/64 bf16 scales, K/64 bf16 biases, the
// row's float bound, padding to an odd number of 16-byte chunks (conflict-free ldmatrix rows in head_fused.cu).
__host__ __device__ constexpr int proxy_row_bytes(int K) { return K + 4 * (K / 64) + 16; }

// x [KC·256] (16-byte aligned, shared or global memory) into a warp's registers: lane l holds x[8c … 8c+7] for the
// chunks c = l + 32j; with norm_w (shared or global memory), RMS-normalised (x · rsqrt(mean x² + eps) · w) as the
// head multiplies it.
template <int KC>
__device__ __forceinline__ void head_x_bf16(const float* x, const float* norm_w, float eps, int lane, float (&xv)[KC * 8]) {
    constexpr int K = KC * 256;
    load_x8<KC>(x, lane, xv);
    if (!norm_w) return;
    float ss = 0.0f; // every warp holds all of x across its lanes: the same sum in each
#pragma unroll
    for (int i = 0; i < KC * 8; ++i) ss = __fmaf_rn(xv[i], xv[i], ss);
    const float inv = rsqrtf(warp_sum(ss) / float(K) + eps);
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const float4* nw = reinterpret_cast<const float4*>(norm_w) + 2 * (lane + j * kWarp);
        const float4 g0 = nw[0], g1 = nw[1];
        const float g[8] = {g0.x, g0.y, g0.z, g0.w, g1.x, g1.y, g1.z, g1.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[j * 8 + i] = __fmul_rn(__fmul_rn(xv[j * 8 + i], inv), g[i]);
    }
}

// A lane's part of a bf16 row's dot product with head_x_bf16's registers: its chunks c = lane + 32j (uint4 each,
// shared or global memory); warp_sum of it is the row's logit.
template <int KC>
__device__ __forceinline__ float head_dot_bf16(const uint4* row, int lane, const float (&xv)[KC * 8]) {
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const uint4 v = row[lane + j * kWarp];
        const float* xp = xv + j * 8;
        float t = __fmul_rn(bf(v.x & 0xffffu), xp[0]);
        t = __fmaf_rn(bf(v.x >> 16), xp[1], t);
        t = __fmaf_rn(bf(v.y & 0xffffu), xp[2], t);
        t = __fmaf_rn(bf(v.y >> 16), xp[3], t);
        t = __fmaf_rn(bf(v.z & 0xffffu), xp[4], t);
        t = __fmaf_rn(bf(v.z >> 16), xp[5], t);
        t = __fmaf_rn(bf(v.w & 0xffffu), xp[6], t);
        t = __fmaf_rn(bf(v.w >> 16), xp[7], t);
        acc = __fadd_rn(acc, t);
    }
    return acc;
}

// The lowest index among the largest of n (max, index, …) partials at part[stride·p] (stride ≥ 2), over one warp:
// lane l takes the partials l, l + 32, …, eight of them loaded together; every lane gets the result.
__device__ __forceinline__ void merge_max_parts(const float* part, int n, int stride, int lane, float& M, int& id) {
    constexpr int B = 8;
    M = -FLT_MAX;
    id = 0x7fffffff;
    for (int p0 = lane; p0 < n; p0 += B * kWarp) {
        float m[B];
        int i[B];
#pragma unroll
        for (int u = 0; u < B; ++u) {
            const int p = p0 + u * kWarp;
            m[u] = p < n ? part[stride * p] : -FLT_MAX;
            i[u] = p < n ? __float_as_int(part[stride * p + 1]) : 0x7fffffff;
        }
#pragma unroll
        for (int u = 0; u < B; ++u)
            if (m[u] > M || (m[u] == M && i[u] < id)) M = m[u], id = i[u];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, M, o);
        const int oi = __shfl_xor_sync(0xffffffffu, id, o);
        if (om > M || (om == M && oi < id)) M = om, id = oi;
    }
}

} // namespace qasr::cuda::detail
