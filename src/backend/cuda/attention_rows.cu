// The decode attention of a batched step's rows (DeviceBatch; contracts in kernels.cuh): rows_attention, one block
// per (kv head, row), and decode_attention_rows, the single-row kernel's body (decode_attention.cuh) per row.
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include "core/error.hpp"

#include <cmath>
#include <string>

namespace qasr::cuda {
namespace {

using namespace detail;

// A batched step's decode attention (head_dim 128): block (kv head g, row r) of 16 warps. q/k RMSNorm + RoPE of
// the row's G query heads and new key as k_qk_rope computes them, the new key and value written into the row's
// cache at its position, then the warps take the keys 0..pos in turn (key j to warp j mod 16, four keys' loads in
// flight), lane l holding dims 4l..4l+3 of each head, with an online softmax per warp; the warps' partials merge in
// warp order. One block per (row, kv head) and no split merge: the fused single-row kernel's key splits, clusters
// and last-block merges took 39 µs per layer for 16 rows (H200, ncu), this ~4–6.
constexpr int kRaWarps = 16, kRaUnroll = 4, kRaMaxG = 4;
__global__ void __launch_bounds__(kRaWarps * kWarp) k_rows_attention(DecAttnArgs a, RowsKv rk) {
    constexpr int HD = 128;
    __shared__ __align__(16) float raw[kRaMaxG + 2][HD];
    __shared__ float inv[kRaMaxG + 1];
    __shared__ __align__(16) float mrg_acc[kRaWarps][kRaMaxG][HD];
    __shared__ float mrg_m[kRaWarps][kRaMaxG], mrg_l[kRaWarps][kRaMaxG];
    dep_wait();
    dep_launch();
    const int g = int(blockIdx.x), r = int(blockIdx.y), G = a.Hq / a.Hkv;
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
    const int p = rk.rows->pos[r];
    const int64_t row = int64_t(a.Hkv) * HD, plane = rk.rows->cap[r] * row;
    float* kc = rk.rows->kv[r] + 2 * rk.layer * plane;
    float* vc = kc + plane;
    const float* qkv = a.qkv + int64_t(r) * (a.Hq + 2 * a.Hkv) * HD;
    // raw rows: q heads g·G … g·G+G−1, then k head g, then v head g
    for (int i = threadIdx.x; i < (G + 2) * HD; i += blockDim.x) {
        const int h = i / HD, d = i % HD;
        const int src = h < G ? g * G + h : h == G ? a.Hq + g : a.Hq + a.Hkv + g;
        raw[h][d] = qkv[int64_t(src) * HD + d];
    }
    __syncthreads();
    if (w <= G) {
        float ss = 0.0f;
        for (int d = lane; d < HD; d += kWarp) ss += raw[w][d] * raw[w][d];
        ss = warp_sum(ss);
        if (lane == 0) inv[w] = rsqrtf(ss / float(HD) + a.eps);
    }
    __syncthreads();
    const float scale = rsqrtf(float(HD));
    constexpr int half = HD / 2;
    float rot0 = 0.0f, rot1 = 0.0f; // this thread's one rotation, applied after every thread has read raw
    int rh = -1, ri = 0;
    if (threadIdx.x < (G + 1) * half) {
        rh = threadIdx.x / half, ri = threadIdx.x % half;
        const float* nw = rh < G ? a.qn : a.kn;
        const float x1 = raw[rh][ri] * inv[rh] * nw[ri], x2 = raw[rh][ri + half] * inv[rh] * nw[ri + half];
        float sn, c;
        sincosf(float(p) * a.inv_freq[ri], &sn, &c);
        rot0 = x1 * c - x2 * sn;
        rot1 = x2 * c + x1 * sn;
    }
    __syncthreads();
    if (rh >= 0) {
        if (rh < G) {
            raw[rh][ri] = rot0 * scale, raw[rh][ri + half] = rot1 * scale;
        } else {
            kc[int64_t(p) * row + g * HD + ri] = rot0;
            kc[int64_t(p) * row + g * HD + ri + half] = rot1;
        }
    }
    for (int d = threadIdx.x; d < HD; d += blockDim.x) vc[int64_t(p) * row + g * HD + d] = raw[G + 1][d];
    __syncthreads(); // the new key and value are in the cache (visible to this block), the q heads rotated
    float4 q[kRaMaxG], acc[kRaMaxG];
    float m[kRaMaxG], l[kRaMaxG];
#pragma unroll
    for (int gg = 0; gg < kRaMaxG; ++gg) {
        q[gg] = gg < G ? reinterpret_cast<const float4*>(raw[gg])[lane] : make_float4(0, 0, 0, 0);
        acc[gg] = make_float4(0, 0, 0, 0);
        m[gg] = -INFINITY, l[gg] = 0.0f;
    }
    const float4* kb = reinterpret_cast<const float4*>(kc + g * HD) + lane;
    const float4* vb = reinterpret_cast<const float4*>(vc + g * HD) + lane;
    const int len = p + 1, rs = int(row / 4);
    for (int j0 = w; j0 < len; j0 += kRaWarps * kRaUnroll) {
        float4 kv[kRaUnroll], vv[kRaUnroll];
#pragma unroll
        for (int u = 0; u < kRaUnroll; ++u) {
            const int j = j0 + u * kRaWarps;
            if (j < len) kv[u] = kb[int64_t(j) * rs], vv[u] = vb[int64_t(j) * rs]; // plain loads: key pos was written here
        }
#pragma unroll
        for (int u = 0; u < kRaUnroll; ++u) {
            if (j0 + u * kRaWarps >= len) break;
#pragma unroll
            for (int gg = 0; gg < kRaMaxG; ++gg) {
                if (gg >= G) break;
                const float sc = warp_sum(q[gg].x * kv[u].x + q[gg].y * kv[u].y + q[gg].z * kv[u].z + q[gg].w * kv[u].w);
                const float nm = fmaxf(m[gg], sc), corr = expf(m[gg] - nm), e = expf(sc - nm);
                l[gg] = l[gg] * corr + e;
                acc[gg] = make_float4(acc[gg].x * corr + e * vv[u].x, acc[gg].y * corr + e * vv[u].y,
                                      acc[gg].z * corr + e * vv[u].z, acc[gg].w * corr + e * vv[u].w);
                m[gg] = nm;
            }
        }
    }
#pragma unroll
    for (int gg = 0; gg < kRaMaxG; ++gg) {
        if (gg >= G) break;
        reinterpret_cast<float4*>(mrg_acc[w][gg])[lane] = acc[gg];
        if (lane == 0) mrg_m[w][gg] = m[gg], mrg_l[w][gg] = l[gg];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
        const int gg = i / HD, d = i % HD;
        float M = -INFINITY;
        for (int ww = 0; ww < kRaWarps; ++ww) M = fmaxf(M, mrg_m[ww][gg]);
        float L = 0.0f, o = 0.0f;
        for (int ww = 0; ww < kRaWarps; ++ww) { // warps without keys: m = −∞, weight 0
            const float e = mrg_m[ww][gg] > -INFINITY ? expf(mrg_m[ww][gg] - M) : 0.0f;
            L += mrg_l[ww][gg] * e;
            o += mrg_acc[ww][gg][d] * e;
        }
        a.o[int64_t(r) * a.Hq * HD + (g * G + gg) * HD + d] = o / L;
    }
}

// The same for row blockIdx.y of a batched step (the fallback of rows_attention; a separate kernel, so that the
// single-row one keeps its parameters read-only): the row's position and cache, its slices of the buffers; the
// splits merge through part/counter.
template <int HD, int GC>
__global__ void __launch_bounds__(kDecThreads) k_decode_attention_rows(DecAttnArgs a, RowsKv rk) {
    dep_wait();
    dep_launch();
    const int r = int(blockIdx.y);
    const int64_t plane = rk.rows->cap[r] * a.Hkv * a.hd;
    a.qkv += int64_t(r) * (a.Hq + 2 * a.Hkv) * a.hd;
    a.pos = rk.rows->pos + r;
    a.kc = rk.rows->kv[r] + 2 * rk.layer * plane;
    a.vc = a.kc + plane;
    a.o += int64_t(r) * a.Hq * a.hd;
    if (a.part) a.part += int64_t(r) * a.Hq * a.splits * decode_partial_floats(a.hd);
    if (a.counter) a.counter += int64_t(r) * a.Hkv;
    decode_attention_block<HD, GC, false, false>(a, int(blockIdx.x));
}

} // namespace

bool rows_attention_applies(int Hq, int Hkv, int hd) {
    return hd == 128 && Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= kRaMaxG;
}

bool rows_attention(const DecAttnArgs& a, RowsKv rk, int rows, cudaStream_t s) {
    if (!rk.rows || !rows_attention_applies(a.Hq, a.Hkv, a.hd) || rows < 1 || rows > BatchRows::kMax) return false;
    launch(k_rows_attention, dim3(unsigned(a.Hkv), unsigned(rows)), dim3(kRaWarps * kWarp), 0, s, a, rk);
    return true;
}

void decode_attention_rows(const DecAttnArgs& a, RowsKv rk, int rows, cudaStream_t s) {
    if (!decode_attention_supported(a.Hq, a.Hkv, a.hd))
        fail("cuda", "decode attention: needs head_dim 64/128/256 and at most 8 query heads per kv head");
    if (!rk.rows || rows < 1 || rows > BatchRows::kMax)
        fail("cuda", "decode attention: a batched step's rows are 1..BatchRows::kMax");
    if (a.splits < 1 || a.splits > kDecMergeMax || (a.splits > 1 && (!a.part || !a.counter)))
        fail("cuda", "decode attention: splits must be 1.." + std::to_string(kDecMergeMax) + " with split buffers");
    const dim3 grid(unsigned(a.Hkv * a.splits), unsigned(rows));
    const int G = a.Hq / a.Hkv;
    if (a.hd == 128 && G == 2) launch(k_decode_attention_rows<128, 2>, grid, dim3(kDecThreads), 0, s, a, rk);
    else if (a.hd == 128) launch(k_decode_attention_rows<128, 0>, grid, dim3(kDecThreads), 0, s, a, rk);
    else if (a.hd == 64) launch(k_decode_attention_rows<64, 0>, grid, dim3(kDecThreads), 0, s, a, rk);
    else launch(k_decode_attention_rows<256, 0>, grid, dim3(kDecThreads), 0, s, a, rk);
}

} // namespace qasr::cuda
