// CUDA kernels of the decoder and encoder layers: matrix-vector products, norms, activations, RoPE, attention,
// greedy choice (declarations and contracts in kernels.cuh; the front end is in frontend.cu).
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/decode_attention.cuh"

#include "core/error.hpp"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace qasr::cuda {

size_t DMat::bytes() const {
    if (bits == 16) return size_t(rows * cols) * 2;
    return size_t(rows * cols) * size_t(bits) / 8 + 2 * size_t(rows * (cols / gs)) * 2;
}

namespace {

using namespace detail;

bool g_pdl = true; // programmatic dependent launch (set_pdl)

// ---------------------------------------------------------------------------------------------------------------
// Matrix-vector products. Block: 256 threads = 8 warps; warp w of block b takes rows (b·8 + w)·RPW … +RPW-1
// (SwiGLU: row i and row i + N/2). x (optionally RMS-normalised) is staged in shared memory, with per-16-column
// sums for the quantized path.

struct MvArgs {
    const void* w;
    const bf16* scales;
    const bf16* biases;
    int64_t N; // output rows (SwiGLU: N = rows/2)
    int K, gs;
    const float* x;
    const float* norm_w;
    float eps;
    float* y;
    int epi;
    int64_t row_off; // SwiGLU: offset of the "up" rows
};

__device__ void stage_x(const MvArgs& a, float* xs, float* xsum16, float* red) {
    float ss = 0.0f;
    if (a.norm_w) {
        for (int k = threadIdx.x; k < a.K; k += blockDim.x) {
            const float v = a.x[k];
            ss += v * v;
        }
        ss = block_sum(ss, red);
    }
    const float inv = a.norm_w ? rsqrtf(ss / float(a.K) + a.eps) : 1.0f;
    for (int k = threadIdx.x; k < a.K; k += blockDim.x) xs[k] = a.norm_w ? a.x[k] * inv * a.norm_w[k] : a.x[k];
    __syncthreads();
    if (xsum16)
        for (int c = threadIdx.x; c < a.K / 16; c += blockDim.x) {
            float t = 0.0f;
#pragma unroll
            for (int j = 0; j < 16; ++j) t += xs[c * 16 + j];
            xsum16[c] = t;
        }
    __syncthreads();
}

// Quantized row: chunks of 16 codes (8-bit: 16 bytes, 6-bit: 12, 4-bit: 8), lane-strided.
template <int BITS>
__device__ __forceinline__ float dot_q_row(const uint8_t* row, const bf16* sc, const bf16* bi, const float* xs,
                                           const float* xsum16, int K, int gs, int lane) {
    float acc = 0.0f;
    const int nc = K / 16;
    constexpr int CB = 16 * BITS / 8; // bytes per chunk
#pragma unroll 2
    for (int c = lane; c < nc; c += kWarp) {
        const uint32_t* p = reinterpret_cast<const uint32_t*>(row + size_t(c) * CB);
        uint32_t w[4];
        if constexpr (BITS == 8) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
            w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
        } else if constexpr (BITS == 4) {
            const uint2 v = __ldg(reinterpret_cast<const uint2*>(p));
            w[0] = v.x, w[1] = v.y, w[2] = 0, w[3] = 0;
        } else {
            w[0] = __ldg(p), w[1] = __ldg(p + 1), w[2] = __ldg(p + 2), w[3] = 0;
        }
        float xp[16]; // four vector loads from shared memory instead of sixteen scalar ones (16-way bank conflicts)
#pragma unroll
        for (int i = 0; i < 16; i += 4) {
            const float4 f = *reinterpret_cast<const float4*>(xs + c * 16 + i);
            xp[i] = f.x, xp[i + 1] = f.y, xp[i + 2] = f.z, xp[i + 3] = f.w;
        }
        float d = 0.0f;
#pragma unroll
        for (int i = 0; i < 16; ++i) d += float(chunk_code<BITS>(w, i)) * xp[i];
        const int g = (c * 16) / gs;
        acc += __bfloat162float(sc[g]) * d + __bfloat162float(bi[g]) * xsum16[c];
    }
    return warp_sum(acc);
}

template <int BITS, int RPW>
__global__ void __launch_bounds__(256) k_matvec(MvArgs a) {
    QASR_TL_ENTRY
    extern __shared__ __align__(16) float smem[];
    float* xs = smem;
    float* xsum16 = BITS == 16 ? nullptr : smem + a.K;
    __shared__ float red[32];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
    const int64_t ng = a.K / (a.gs > 0 ? a.gs : 1);
    { // before waiting for the previous kernel: pull this warp's first rows towards L2
        const int64_t row_b = BITS == 16 ? int64_t(a.K) * 2 : int64_t(a.K) * BITS / 8;
        const int parts = a.epi == int(Epi::SwiGLU) ? 2 : 1;
        const int64_t r0 = (int64_t(blockIdx.x) * 8 + warp) * RPW;
        for (int rr = 0; rr < RPW; ++rr)
            for (int p = 0; p < parts; ++p) {
                const int64_t r = r0 + rr;
                if (r >= a.N) break;
                const char* base = static_cast<const char*>(a.w) + (r + p * a.row_off) * row_b;
                for (int64_t off = int64_t(lane) * 128; off < row_b; off += kWarp * 128) prefetch_l2(base + off);
            }
    }
    dep_wait();
    QASR_TL_WAITED(kTlMatvec, false);
    stage_x(a, xs, xsum16, red);
    for (int64_t base = (int64_t(blockIdx.x) * 8 + warp) * RPW; base < a.N; base += int64_t(gridDim.x) * 8 * RPW) {
#pragma unroll
        for (int rr = 0; rr < RPW; ++rr) {
            const int64_t r = base + rr;
            if (r >= a.N) break;
            float v[2];
            const int parts = a.epi == int(Epi::SwiGLU) ? 2 : 1;
            for (int p = 0; p < parts; ++p) {
                const int64_t row = r + p * a.row_off;
                if constexpr (BITS == 16)
                    v[p] = dot_bf16_row(static_cast<const uint16_t*>(a.w) + row * a.K, xs, a.K, lane);
                else
                    v[p] = dot_q_row<BITS>(static_cast<const uint8_t*>(a.w) + row * (int64_t(a.K) * BITS / 8),
                                           a.scales + row * ng, a.biases + row * ng, xs, xsum16, a.K, a.gs, lane);
            }
            if (lane == 0) {
                if (a.epi == int(Epi::Store)) a.y[r] = v[0];
                else if (a.epi == int(Epi::Add)) a.y[r] += v[0];
                else a.y[r] = silu(v[0]) * v[1];
            }
        }
    }
    dep_launch(); // at the end: triggering at the start measured 1.8 % slower per token (0.6B bf16, H200)
}

template <int BITS>
void launch_matvec(const MvArgs& a, cudaStream_t s) {
    const size_t sm = size_t(a.K) * sizeof(float) + (BITS == 16 ? 0 : size_t(a.K / 16) * sizeof(float));
    if (a.N > 16384) {
        const int64_t blocks = (a.N + 31) / 32;
        launch(k_matvec<BITS, 4>, dim3(unsigned(blocks)), dim3(256), sm, s, a);
    } else {
        const int64_t blocks = (a.N + 7) / 8;
        launch(k_matvec<BITS, 1>, dim3(unsigned(blocks)), dim3(256), sm, s, a);
    }
}

// ---------------------------------------------------------------------------------------------------------------

__global__ void k_embed(DMat t, const int* ids, float* out) {
    QASR_TL_ENTRY
    dep_wait();
    QASR_TL_WAITED(kTlEmbed, true);
    dep_launch();
    const int i = blockIdx.x;
    const int64_t id = ids[i];
    const int64_t K = t.cols;
    float* o = out + int64_t(i) * K;
    if (t.bits == 16) {
        const uint16_t* r = static_cast<const uint16_t*>(t.data) + id * K;
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x) o[k] = bf(r[k]);
    } else {
        const uint8_t* r = static_cast<const uint8_t*>(t.data) + id * (K * t.bits / 8);
        const int64_t ng = K / t.gs;
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
            o[k] = __bfloat162float(t.scales[id * ng + k / t.gs]) * float(code_at(r, k, t.bits)) +
                   __bfloat162float(t.biases[id * ng + k / t.gs]);
    }
}

__global__ void k_dequant(DMat t, bf16* out) {
    const int64_t K = t.cols, ng = K / t.gs;
    const int64_t r = blockIdx.x;
    const uint8_t* row = static_cast<const uint8_t*>(t.data) + r * (K * t.bits / 8);
    for (int64_t k = threadIdx.x; k < K; k += blockDim.x)
        out[r * K + k] = __float2bfloat16(__bfloat162float(t.scales[r * ng + k / t.gs]) * float(code_at(row, k, t.bits)) +
                                          __bfloat162float(t.biases[r * ng + k / t.gs]));
}

__global__ void k_rms_norm(const float* x, int d, const float* w, float eps, float* of, bf16* ob) {
    __shared__ float red[32];
    const float* r = x + int64_t(blockIdx.x) * d;
    float ss = 0.0f;
    for (int k = threadIdx.x; k < d; k += blockDim.x) ss += r[k] * r[k];
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / float(d) + eps);
    for (int k = threadIdx.x; k < d; k += blockDim.x) {
        const float v = r[k] * inv * w[k];
        if (of) of[int64_t(blockIdx.x) * d + k] = v;
        if (ob) ob[int64_t(blockIdx.x) * d + k] = __float2bfloat16(v);
    }
}

__global__ void k_layer_norm(const float* x, int d, const float* w, const float* b, float eps, bf16* out) {
    __shared__ float red[32];
    const float* r = x + int64_t(blockIdx.x) * d;
    float s = 0.0f;
    for (int k = threadIdx.x; k < d; k += blockDim.x) s += r[k];
    const float mean = block_sum(s, red) / float(d);
    float v = 0.0f;
    for (int k = threadIdx.x; k < d; k += blockDim.x) v += (r[k] - mean) * (r[k] - mean);
    const float inv = rsqrtf(block_sum(v, red) / float(d) + eps);
    for (int k = threadIdx.x; k < d; k += blockDim.x)
        out[int64_t(blockIdx.x) * d + k] = __float2bfloat16((r[k] - mean) * inv * w[k] + b[k]);
}

__global__ void k_to_bf16(const float* x, size_t n, bf16* out) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        out[i] = __float2bfloat16(x[i]);
}

__global__ void k_bias_act(float* y, int64_t total, int n, const float* bias, bool gelu, bf16* ob) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float v = y[i] + (bias ? bias[i % n] : 0.0f);
        if (gelu) v = gelu_erf(v);
        y[i] = v;
        if (ob) ob[i] = __float2bfloat16(v);
    }
}

__global__ void k_swiglu(const float* gu, int64_t total, int I, bf16* out) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / I, c = i % I;
        out[i] = __float2bfloat16(silu(gu[r * 2 * I + c]) * gu[r * 2 * I + I + c]);
    }
}

// One warp per (row, head) over the q heads then the k heads; v heads are copied.
__global__ void k_qk_rope(const float* qkv, int n, const int* pos, int Hq, int Hkv, int hd, const float* qn,
                          const float* kn, float eps, const float* inv_freq, float* q_out, float* kc, float* vc) {
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x % kWarp;
    const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
    const int H = Hq + 2 * Hkv;
    if (gw >= int64_t(n) * H) return;
    const int r = int(gw / H), h = int(gw % H);
    const int p = (pos ? *pos : 0) + r;
    const float* src = qkv + int64_t(r) * H * hd + int64_t(h) * hd;
    if (h >= Hq + Hkv) { // v
        float* dst = vc + int64_t(p) * Hkv * hd + int64_t(h - Hq - Hkv) * hd;
        for (int i = lane; i < hd; i += kWarp) dst[i] = src[i];
        return;
    }
    const bool isq = h < Hq;
    const float* nw = isq ? qn : kn;
    float ss = 0.0f;
    for (int i = lane; i < hd; i += kWarp) ss += src[i] * src[i];
    ss = warp_sum(ss);
    const float inv = rsqrtf(ss / float(hd) + eps);
    float* dst = isq ? q_out + int64_t(r) * Hq * hd + int64_t(h) * hd : kc + int64_t(p) * Hkv * hd + int64_t(h - Hq) * hd;
    const int half = hd / 2;
    for (int i = lane; i < half; i += kWarp) {
        const float x1 = src[i] * inv * nw[i], x2 = src[i + half] * inv * nw[i + half];
        const float ang = float(p) * inv_freq[i];
        const float c = cosf(ang), sn = sinf(ang);
        dst[i] = x1 * c - x2 * sn;
        dst[i + half] = x2 * c + x1 * sn;
    }
}

// Attention: one warp per (row, head, split). Pass 1: running max and sum of exp over the split's keys (lane-
// strided); pass 2: scores again, weights broadcast by shuffles, lane owns output dims lane, lane+32, ….
constexpr int kMaxHd = 256;
// HD > 0: head dimension known at compile time (a multiple of 32): each lane's key row is loaded with all its
// float4s in flight and the loops are unrolled. HD = 0: any multiple of 4 up to kMaxHd.
template <int HD>
__global__ void __launch_bounds__(128) k_attention(AttnArgs a) {
    constexpr int DM = HD > 0 ? HD : kMaxHd;
    __shared__ __align__(16) float qsh[4][DM];
    dep_wait();
    dep_launch();
    const int hd = HD > 0 ? HD : a.hd;
    const int lane = threadIdx.x % kWarp, wib = threadIdx.x / kWarp;
    const int64_t gw = int64_t(blockIdx.x) * (blockDim.x / kWarp) + wib;
    const int64_t total = int64_t(a.n) * a.heads * a.splits;
    if (gw >= total) return;
    const int sp = int(gw % a.splits);
    const int h = int((gw / a.splits) % a.heads);
    const int r = int(gw / (int64_t(a.splits) * a.heads));
    const int kvh = h / (a.heads / a.kv_heads);
    int lo, hi;
    if (a.causal) {
        lo = 0;
        hi = (a.past ? *a.past : 0) + r + 1;
    } else {
        lo = (r / a.window) * a.window;
        hi = min(lo + a.window, a.n);
    }
    const int len = hi - lo, chunk = (len + a.splits - 1) / a.splits;
    const int s0 = lo + sp * chunk, s1 = min(hi, s0 + chunk);
    const float scale = rsqrtf(float(hd));
    const float* q = a.q + int64_t(r) * a.q_stride + int64_t(h) * hd;
    for (int i = lane; i < hd; i += kWarp) qsh[wib][i] = q[i] * scale;
    __syncwarp();
    const float* kb = a.k + int64_t(kvh) * hd;
    const float* vb = a.v + int64_t(kvh) * hd;
    const float4* qq = reinterpret_cast<const float4*>(qsh[wib]);
    auto score = [&](int j) {
        const float4* kr = reinterpret_cast<const float4*>(kb + int64_t(j) * a.kv_stride);
        float d = 0.0f;
        if constexpr (HD > 0) {
            float4 kv[HD / 4];
#pragma unroll
            for (int i = 0; i < HD / 4; ++i) kv[i] = __ldg(kr + i);
#pragma unroll
            for (int i = 0; i < HD / 4; ++i) {
                const float4 qv = qq[i];
                d += kv[i].x * qv.x + kv[i].y * qv.y + kv[i].z * qv.z + kv[i].w * qv.w;
            }
        } else {
#pragma unroll 8
            for (int i = 0; i < hd / 4; ++i) {
                const float4 kv = __ldg(kr + i), qv = qq[i];
                d += kv.x * qv.x + kv.y * qv.y + kv.z * qv.z + kv.w * qv.w;
            }
        }
        return d;
    };
    float m = -FLT_MAX, l = 0.0f;
    for (int j = s0 + lane; j < s1; j += kWarp) {
        const float sc = score(j);
        const float nm = fmaxf(m, sc);
        l = l * expf(m - nm) + expf(sc - nm);
        m = nm;
    }
    const float M = warp_max(m);
    l = warp_sum(l * (m == -FLT_MAX ? 0.0f : expf(m - M)));
    constexpr int ND = DM / kWarp;
    float acc[ND];
#pragma unroll
    for (int t = 0; t < ND; ++t) acc[t] = 0.0f;
    for (int base = s0; base < s1; base += kWarp) {
        const int j = base + lane;
        const float p = j < s1 ? expf(score(j) - M) : 0.0f;
        const int cnt = min(kWarp, s1 - base);
#pragma unroll 4
        for (int t = 0; t < cnt; ++t) {
            const float pj = __shfl_sync(0xffffffffu, p, t);
            const float* vr = vb + int64_t(base + t) * a.kv_stride;
#pragma unroll
            for (int u = 0; u < ND; ++u)
                if (HD > 0 || lane + u * kWarp < hd) acc[u] += pj * __ldg(vr + lane + u * kWarp);
        }
    }
    if (a.splits == 1) {
        float* o = a.o + int64_t(r) * a.o_stride + int64_t(h) * hd;
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
        for (int u = 0; u < ND; ++u)
            if (HD > 0 || lane + u * kWarp < hd) o[lane + u * kWarp] = acc[u] * inv;
    } else {
        float* pp = a.part + gw * (hd + 2);
#pragma unroll
        for (int u = 0; u < ND; ++u)
            if (HD > 0 || lane + u * kWarp < hd) pp[lane + u * kWarp] = acc[u];
        if (lane == 0) {
            pp[hd] = s1 > s0 ? M : -FLT_MAX;
            pp[hd + 1] = s1 > s0 ? l : 0.0f;
        }
    }
}

// Attention of many query rows (prefill, encoder), tiled: block (tile of kAtQ query rows, head), kAtQ / 4 rows per
// warp. Each tile of 32 keys and values is loaded once into shared memory (coalesced) for all the block's rows; lane
// j scores key j of the tile (keys padded to HD + 1 floats: conflict-free), an online softmax per row, then each
// lane accumulates output dims lane, lane + 32, … from the values in shared memory. About ten times faster than
// k_attention for a 158-row prefill (which walks every key per row from L2 at one row per warp).
constexpr int kAtQ = 16, kAtK = 32;
template <int HD>
__global__ void __launch_bounds__(128) k_attention_tiled(AttnArgs a) {
    constexpr int RW = kAtQ / 4, ND = HD / kWarp;
    __shared__ __align__(16) float Qs[kAtQ][HD];
    __shared__ float Ks[kAtK][HD + 1];
    __shared__ __align__(16) float Vs[kAtK][HD];
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
    const int r0 = blockIdx.x * kAtQ, h = blockIdx.y, kvh = h / (a.heads / a.kv_heads);
    const int past = a.causal && a.past ? *a.past : 0;
    auto range = [&](int r, int& lo, int& hi) { // keys of query row r (none past the last row)
        if (r >= a.n) lo = hi = 0;
        else if (a.causal) lo = 0, hi = past + r + 1;
        else lo = (r / a.window) * a.window, hi = min(lo + a.window, a.n);
    };
    int klo, khi, t;
    range(r0, klo, t);
    range(min(a.n, r0 + kAtQ) - 1, t, khi);
    const float scale = rsqrtf(float(HD));
    for (int i = threadIdx.x; i < kAtQ * HD / 4; i += blockDim.x) {
        const int r = i / (HD / 4), c = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + r < a.n) v = *reinterpret_cast<const float4*>(a.q + int64_t(r0 + r) * a.q_stride + int64_t(h) * HD + c);
        *reinterpret_cast<float4*>(&Qs[r][c]) = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
    }
    int lo[RW], hi[RW];
    float m[RW], l[RW], acc[RW][ND];
#pragma unroll
    for (int i = 0; i < RW; ++i) {
        range(r0 + w * RW + i, lo[i], hi[i]);
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int u = 0; u < ND; ++u) acc[i][u] = 0.0f;
    }
    const float* kb = a.k + int64_t(kvh) * HD;
    const float* vb = a.v + int64_t(kvh) * HD;
    for (int t0 = klo; t0 < khi; t0 += kAtK) {
        __syncthreads(); // the previous tile's readers are done (and Qs is written, first time)
        for (int i = threadIdx.x; i < kAtK * HD / 4; i += blockDim.x) {
            const int j = i / (HD / 4), c = (i % (HD / 4)) * 4;
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (t0 + j < khi) {
                kv = *reinterpret_cast<const float4*>(kb + int64_t(t0 + j) * a.kv_stride + c);
                vv = *reinterpret_cast<const float4*>(vb + int64_t(t0 + j) * a.kv_stride + c);
            }
            Ks[j][c] = kv.x, Ks[j][c + 1] = kv.y, Ks[j][c + 2] = kv.z, Ks[j][c + 3] = kv.w;
            *reinterpret_cast<float4*>(&Vs[j][c]) = vv;
        }
        __syncthreads();
        float sc[RW];
#pragma unroll
        for (int i = 0; i < RW; ++i) sc[i] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < HD; d += 4) {
            const float k0 = Ks[lane][d], k1 = Ks[lane][d + 1], k2 = Ks[lane][d + 2], k3 = Ks[lane][d + 3];
#pragma unroll
            for (int i = 0; i < RW; ++i) {
                const float4 q = *reinterpret_cast<const float4*>(&Qs[w * RW + i][d]);
                sc[i] += k0 * q.x + k1 * q.y + k2 * q.z + k3 * q.w;
            }
        }
        const int kj = t0 + lane;
        float p[RW];
#pragma unroll
        for (int i = 0; i < RW; ++i) {
            const bool ok = kj >= lo[i] && kj < hi[i];
            const float mx = warp_max(ok ? sc[i] : -INFINITY);
            const float mn = fmaxf(m[i], mx);
            if (mn == -INFINITY) { // no key of this row in the tile (yet)
                p[i] = 0.0f;
                continue;
            }
            p[i] = ok ? expf(sc[i] - mn) : 0.0f;
            const float r = expf(m[i] - mn); // 0 when m was −inf
            l[i] = l[i] * r + warp_sum(p[i]);
            m[i] = mn;
#pragma unroll
            for (int u = 0; u < ND; ++u) acc[i][u] *= r;
        }
        const int nk = min(kAtK, khi - t0);
        for (int j = 0; j < nk; ++j) {
            float pj[RW];
#pragma unroll
            for (int i = 0; i < RW; ++i) pj[i] = __shfl_sync(0xffffffffu, p[i], j);
#pragma unroll
            for (int u = 0; u < ND; ++u) {
                const float v = Vs[j][lane + u * kWarp];
#pragma unroll
                for (int i = 0; i < RW; ++i) acc[i][u] += pj[i] * v;
            }
        }
    }
#pragma unroll
    for (int i = 0; i < RW; ++i) {
        const int r = r0 + w * RW + i;
        if (r >= a.n) break;
        const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float* o = a.o + int64_t(r) * a.o_stride + int64_t(h) * HD;
#pragma unroll
        for (int u = 0; u < ND; ++u) o[lane + u * kWarp] = acc[i][u] * inv;
    }
}

__global__ void k_attention_combine(AttnArgs a) {
    dep_wait();
    dep_launch();
    const int64_t rh = blockIdx.x; // row * heads + head
    const int r = int(rh / a.heads), h = int(rh % a.heads);
    const float* pp = a.part + rh * a.splits * (a.hd + 2);
    float M = -FLT_MAX;
    for (int s = 0; s < a.splits; ++s) M = fmaxf(M, pp[s * (a.hd + 2) + a.hd]);
    float L = 0.0f;
    for (int s = 0; s < a.splits; ++s) {
        const float ms = pp[s * (a.hd + 2) + a.hd];
        if (ms > -FLT_MAX) L += pp[s * (a.hd + 2) + a.hd + 1] * expf(ms - M);
    }
    float* o = a.o + int64_t(r) * a.o_stride + int64_t(h) * a.hd;
    for (int i = threadIdx.x; i < a.hd; i += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < a.splits; ++s) {
            const float ms = pp[s * (a.hd + 2) + a.hd];
            if (ms > -FLT_MAX) acc += pp[s * (a.hd + 2) + i] * expf(ms - M);
        }
        o[i] = acc / L;
    }
}

// PRE: waits for the q/k/v product inside, after loading what does not depend on it — for a product that
// triggers this launch early (matvec_prefetch: 0.819 → 0.780 ms/token, H200, 0.6B bf16); else the wait first.
// CL: launched in clusters of a.splits blocks (decode_attention_block's cluster merge).
template <int HD, int GC, bool PRE, bool CL = false>
__global__ void __launch_bounds__(kDecThreads) k_decode_attention(DecAttnArgs a) {
    if constexpr (!PRE) {
        dep_wait();
        dep_launch();
    }
    decode_attention_block<HD, GC, PRE, CL>(a, int(blockIdx.x));
}

// Whether kernel k can run clusters of n blocks here with `smem` bytes of dynamic shared memory each (sm_90; sizes
// above 8 need the non-portable attribute).
template <class K> bool cluster_ok(K k, int n, size_t smem) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        major < 9 || n < 2 || n > kDecClusterMax) {
        cudaGetLastError();
        return false;
    }
    if (n > 8 && cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(n));
    cfg.blockDim = dim3(kDecThreads);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(n), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr, cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, k, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return clusters > 0;
}

// Cached per (device, splits, smem, kernel): whether the cluster launch is possible.
template <class K> bool cluster_ok_cached(K k, int n, size_t smem) {
    static std::mutex mu;
    static std::map<std::tuple<int, int, size_t, const void*>, bool> ok;
    int dev = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    std::lock_guard<std::mutex> lk(mu);
    const auto key = std::make_tuple(dev, n, smem, reinterpret_cast<const void*>(k));
    auto it = ok.find(key);
    if (it == ok.end()) it = ok.emplace(key, cluster_ok(k, n, smem)).first;
    return it->second;
}

template <class K> void launch_cluster(K k, const DecAttnArgs& a, dim3 grid, size_t smem, cudaStream_t s) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kDecThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(a.splits), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 2 : 1;
    QASR_CUDA(cudaLaunchKernelEx(&cfg, k, a));
}

template <int HD, int GC, bool PRE>
void launch_decode_attention_cluster(const DecAttnArgs& a, dim3 grid, cudaStream_t s) {
    if (!cluster_ok_cached(k_decode_attention<HD, GC, PRE, true>, a.splits, 0))
        return launch(k_decode_attention<HD, GC, PRE>, grid, dim3(kDecThreads), 0, s, a);
    launch_cluster(k_decode_attention<HD, GC, PRE, true>, a, grid, 0, s);
}

template <int HD, int GC>
void launch_decode_attention(const DecAttnArgs& a, dim3 grid, cudaStream_t s) {
    if (a.cluster && a.splits > 1 && a.splits <= kDecClusterMax) {
        if (a.pre_wait) launch_decode_attention_cluster<HD, GC, true>(a, grid, s);
        else launch_decode_attention_cluster<HD, GC, false>(a, grid, s);
        return;
    }
    if (a.pre_wait) launch(k_decode_attention<HD, GC, true>, grid, dim3(kDecThreads), 0, s, a);
    else launch(k_decode_attention<HD, GC, false>, grid, dim3(kDecThreads), 0, s, a);
}

// Greedy choice in two kernels: each block reduces a slice to (max, lowest index of the max, Σexp(x − max));
// the final block merges the slices and writes the token.
constexpr int kArgBlocks = 132;
__global__ void k_argmax_part(const float* x, int V, float* part) {
    QASR_TL_ENTRY
    dep_wait();
    QASR_TL_WAITED(kTlArgPart, false);
    dep_launch();
    __shared__ float sv[32], ss[32];
    __shared__ int si[32];
    const int per = (V + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(V, lo + per);
    float bv = -FLT_MAX;
    int bi = 0x7fffffff;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const float v = x[i];
        if (v > bv) bv = v, bi = i; // strided scan: a thread's first maximum is its lowest index
    }
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
    }
    if (lane == 0) sv[w] = bv, si[w] = bi;
    __syncthreads();
    if (w == 0) {
        bv = lane < nw ? sv[lane] : -FLT_MAX;
        bi = lane < nw ? si[lane] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        if (lane == 0) sv[0] = bv, si[0] = bi;
    }
    __syncthreads();
    const float mx = sv[0];
    float sum = 0.0f;
    for (int i = lo + threadIdx.x; i < hi; i += blockDim.x) sum += expf(x[i] - mx);
    sum = block_sum(sum, ss);
    if (threadIdx.x == 0) {
        part[3 * blockIdx.x] = mx;
        part[3 * blockIdx.x + 1] = __int_as_float(si[0]);
        part[3 * blockIdx.x + 2] = hi > lo ? sum : 0.0f;
    }
}

__global__ void k_argmax_final(const float* x, const float* part, int nparts, int* tok, int* pos, int* count, int2* ring,
                               int ring_size, bool advance) {
    QASR_TL_ENTRY
    dep_wait();
    QASR_TL_WAITED(kTlArgFinal, false);
    dep_launch();
    if (threadIdx.x != 0) return;
    float M = -FLT_MAX;
    int id = 0x7fffffff;
    for (int p = 0; p < nparts; ++p) {
        const float m = part[3 * p];
        const int i = __float_as_int(part[3 * p + 1]);
        if (m > M || (m == M && i < id)) M = m, id = i;
    }
    float S = 0.0f;
    for (int p = 0; p < nparts; ++p)
        if (part[3 * p + 2] > 0.0f) S += part[3 * p + 2] * expf(part[3 * p] - M);
    const float lp = (x[id] - M) - logf(S);
    *tok = id;
    const int c = *count;
    ring[c % ring_size] = make_int2(id, __float_as_int(lp));
    *count = c + 1;
    if (advance) *pos += 1;
}

__global__ void k_set_ints(int* p, int a, int b) {
    p[0] = a;
    p[1] = b;
}

} // namespace

bool matvec(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s) {
    MvArgs a{W.data, W.scales, W.biases, W.rows, int(W.cols), W.gs, x, norm_w, eps, y, int(epi), 0};
    if (epi == Epi::SwiGLU) {
        a.N = W.rows / 2;
        a.row_off = W.rows / 2;
    }
    if (W.cols % 16 != 0) fail("cuda", "matvec needs a multiple of 16 columns");
    if (matvec_prefetch(W, x, norm_w, eps, y, epi, s)) return true;
    switch (W.bits) {
    case 16: launch_matvec<16>(a, s); break;
    case 8: launch_matvec<8>(a, s); break;
    case 6: launch_matvec<6>(a, s); break;
    case 4: launch_matvec<4>(a, s); break;
    default: fail("cuda", "matvec: unsupported weight width " + std::to_string(W.bits));
    }
    QASR_CUDA_LAUNCHED();
    return false;
}

void embed(const DMat& t, const int* ids, int n, float* out, cudaStream_t s) {
    if (n <= 0) return;
    launch(k_embed, dim3(unsigned(n)), dim3(256), 0, s, t, ids, out);
    QASR_CUDA_LAUNCHED();
}

void dequant_bf16(const DMat& W, bf16* out, cudaStream_t s) {
    if (W.bits == 16) {
        QASR_CUDA(cudaMemcpyAsync(out, W.data, size_t(W.rows * W.cols) * 2, cudaMemcpyDeviceToDevice, s));
        return;
    }
    k_dequant<<<unsigned(W.rows), 256, 0, s>>>(W, out);
    QASR_CUDA_LAUNCHED();
}

void rms_norm(const float* x, int rows, int d, const float* w, float eps, float* of, bf16* ob, cudaStream_t s) {
    if (rows <= 0) return;
    k_rms_norm<<<unsigned(rows), 256, 0, s>>>(x, d, w, eps, of, ob);
    QASR_CUDA_LAUNCHED();
}

void layer_norm(const float* x, int rows, int d, const float* w, const float* b, float eps, bf16* out, cudaStream_t s) {
    if (rows <= 0) return;
    k_layer_norm<<<unsigned(rows), 256, 0, s>>>(x, d, w, b, eps, out);
    QASR_CUDA_LAUNCHED();
}

void to_bf16(const float* x, size_t n, bf16* out, cudaStream_t s) {
    if (!n) return;
    k_to_bf16<<<grid_for(int64_t(n)), 256, 0, s>>>(x, n, out);
    QASR_CUDA_LAUNCHED();
}

void bias_act(float* y, int rows, int n, const float* bias, bool gelu, bf16* ob, cudaStream_t s) {
    const int64_t total = int64_t(rows) * n;
    if (!total) return;
    k_bias_act<<<grid_for(total), 256, 0, s>>>(y, total, n, bias, gelu, ob);
    QASR_CUDA_LAUNCHED();
}

void swiglu_bf16(const float* gu, int rows, int I, bf16* out, cudaStream_t s) {
    const int64_t total = int64_t(rows) * I;
    if (!total) return;
    k_swiglu<<<grid_for(total), 256, 0, s>>>(gu, total, I, out);
    QASR_CUDA_LAUNCHED();
}

void qk_norm_rope_kv(const float* qkv, int n, const int* pos, int Hq, int Hkv, int hd, const float* qn, const float* kn,
                     float eps, const float* inv_freq, float* q_out, float* kc, float* vc, cudaStream_t s) {
    const int64_t warps = int64_t(n) * (Hq + 2 * Hkv);
    if (!warps) return;
    launch(k_qk_rope, dim3(unsigned((warps * kWarp + 255) / 256)), dim3(256), 0, s, qkv, n, pos, Hq, Hkv, hd, qn, kn,
           eps, inv_freq, q_out, kc, vc);
    QASR_CUDA_LAUNCHED();
}

void attention(const AttnArgs& a, cudaStream_t s) {
    if (a.hd > kMaxHd || a.hd % 4 != 0) fail("cuda", "attention: head_dim must be a multiple of 4, at most 256");
    if (a.heads % a.kv_heads != 0) fail("cuda", "attention: heads not a multiple of kv heads");
    const int64_t warps = int64_t(a.n) * a.heads * a.splits;
    if (!warps) return;
    // many rows in one split: the tiled kernel (QASR_CUDA_ATTN_TILED=0 keeps the row-per-warp one, for A/B)
    static const bool tiled = [] {
        const char* e = std::getenv("QASR_CUDA_ATTN_TILED");
        return !(e && std::string(e) == "0");
    }();
    if (tiled && a.splits == 1 && a.n > 1 && (a.hd == 128 || a.hd == 64) && a.q_stride % 4 == 0 && a.kv_stride % 4 == 0) {
        const dim3 tg(unsigned((a.n + kAtQ - 1) / kAtQ), unsigned(a.heads));
        if (a.hd == 128) launch(k_attention_tiled<128>, tg, dim3(128), 0, s, a);
        else launch(k_attention_tiled<64>, tg, dim3(128), 0, s, a);
        return;
    }
    const dim3 grid(unsigned((warps + 3) / 4));
    if (a.hd == 128) launch(k_attention<128>, grid, dim3(128), 0, s, a);
    else if (a.hd == 64) launch(k_attention<64>, grid, dim3(128), 0, s, a);
    else launch(k_attention<0>, grid, dim3(128), 0, s, a);
    if (a.splits > 1) launch(k_attention_combine, dim3(unsigned(int64_t(a.n) * a.heads)), dim3(128), 0, s, a);
}

bool decode_attention_supported(int Hq, int Hkv, int hd) {
    return Hkv > 0 && Hq % Hkv == 0 && Hq / Hkv <= kDecMaxG && (hd == 64 || hd == 128 || hd == 256);
}

void decode_attention(const DecAttnArgs& a, cudaStream_t s) {
    if (!decode_attention_supported(a.Hq, a.Hkv, a.hd))
        fail("cuda", "decode attention: needs head_dim 64/128/256 and at most 8 query heads per kv head");
    if (a.splits < 1 || a.splits > kDecMergeMax || (a.splits > 1 && (!a.part || !a.counter)))
        fail("cuda", "decode attention: splits must be 1.." + std::to_string(kDecMergeMax) + " with split buffers");
    const dim3 grid(unsigned(a.Hkv * a.splits));
    const int G = a.Hq / a.Hkv; // the Qwen3-ASR sizes have 2 query heads per kv head
    if (a.hd == 128 && G == 2) launch_decode_attention<128, 2>(a, grid, s);
    else if (a.hd == 128) launch_decode_attention<128, 0>(a, grid, s);
    else if (a.hd == 64) launch_decode_attention<64, 0>(a, grid, s);
    else launch_decode_attention<256, 0>(a, grid, s);
}

void argmax_token(const float* logits, int V, float* scratch, int* tok, int* pos, int* count, int2* ring, int ring_size,
                  bool advance, cudaStream_t s) {
    launch(k_argmax_part, dim3(kArgBlocks), dim3(1024), 0, s, logits, V, scratch);
    launch(k_argmax_final, dim3(1), dim3(32), 0, s, logits, static_cast<const float*>(scratch), kArgBlocks, tok, pos, count,
           ring, ring_size, advance);
}

void set_pdl(bool on) { g_pdl = on; }
QASR_TL_BIND(timeline_bind_kernels)
bool pdl_enabled() { return g_pdl; }

void set_ints(int* p, int a, int b, cudaStream_t s) {
    k_set_ints<<<1, 1, 0, s>>>(p, a, b);
    QASR_CUDA_LAUNCHED();
}

void gemm(cublasHandle_t h, const bf16* A, int M, int K, const bf16* W, int N, float* C, float beta) {
    if (M <= 0 || N <= 0) return;
    const float alpha = 1.0f;
    // Column-major view: Cᵀ [N, M] = W [N, K] · Aᵀ [K, M].
    QASR_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, W, CUDA_R_16BF, K, A, CUDA_R_16BF, K, &beta,
                             C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

} // namespace qasr::cuda
