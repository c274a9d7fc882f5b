// CUDA kernels of the decoder and encoder layers: matrix-vector products, norms, activations, RoPE, greedy choice
// (declarations and contracts in kernels.cuh; attention in attention.cu, the front end in frontend.cu, the
// prefetching decode products in matvec_prefetch.cu).
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/lm_head.cuh"

#include "core/error.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

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

// The row kernels of the encoder and the prefill (RMSNorm, layer norm): one block per row of d = 4·d4 floats, the row
// held in registers as float4s (at most kRowV per thread) from one read, sums over the block, 16-byte loads and 8-byte
// bf16 stores; launched with programmatic serialization (dep_wait first). Before session 13 each element was read
// twice (three times in the layer norm) with 4-byte loads: ncu, H200, jfk 11 s, 158-row RMSNorm 4.1 µs, 143-row layer
// norm 5.5 µs. The old kernels stay for widths that are not multiples of 4 or wider than kRowV · 4 · 256.
constexpr int kRowV = 4;
inline int row_threads(int d4) { return std::min(256, (d4 + kWarp - 1) / kWarp * kWarp); }
inline bool row_fits(int d, const void* a, const void* b, const void* c, const void* o8) {
    const auto al = [](const void* p, int n) { return !p || reinterpret_cast<uintptr_t>(p) % n == 0; };
    return d % 4 == 0 && d / 4 <= kRowV * row_threads(d / 4) && al(a, 16) && al(b, 16) && al(c, 16) && al(o8, 8);
}

// A block's row of 4·d4 floats into its threads' registers (v[j] = float4 threadIdx.x + j·blockDim.x; zero past the
// row); with add, add[] is added first and the sum written back to the row.
__device__ __forceinline__ void load_row4(float* row, int d4, const float* add, float4 (&v)[kRowV]) {
    float4* r = reinterpret_cast<float4*>(row);
#pragma unroll
    for (int j = 0; j < kRowV; ++j) {
        const int k = threadIdx.x + j * blockDim.x;
        v[j] = k < d4 ? r[k] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (add && k < d4) {
            const float4 a = reinterpret_cast<const float4*>(add)[k];
            v[j].x += a.x, v[j].y += a.y, v[j].z += a.z, v[j].w += a.w;
            r[k] = v[j];
        }
    }
}

__global__ void k_rms_norm4(const float* x, int d4, const float* w, float eps, float* of, bf16* ob) {
    dep_wait();
    __shared__ float red[32];
    const int64_t base = int64_t(blockIdx.x) * d4;
    float4 v[kRowV];
    load_row4(const_cast<float*>(x) + base * 4, d4, nullptr, v);
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowV; ++j) ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
    dep_launch();
    const float inv = rsqrtf(block_sum(ss, red) / float(4 * d4) + eps);
#pragma unroll
    for (int j = 0; j < kRowV; ++j) {
        const int k = threadIdx.x + j * blockDim.x;
        if (k >= d4) break;
        const float4 g = reinterpret_cast<const float4*>(w)[k];
        const float4 o = make_float4(v[j].x * inv * g.x, v[j].y * inv * g.y, v[j].z * inv * g.z, v[j].w * inv * g.w);
        if (of) reinterpret_cast<float4*>(of)[base + k] = o;
        if (ob) store_bf16x4(ob + (base + k) * 4, o.x, o.y, o.z, o.w);
    }
}

__global__ void k_layer_norm4(float* x, int d4, const float* add, const float* w, const float* b, float eps, bf16* out) {
    dep_wait();
    __shared__ float red[32];
    const int64_t base = int64_t(blockIdx.x) * d4;
    float4 v[kRowV];
    load_row4(x + base * 4, d4, add, v);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowV; ++j) s += v[j].x + v[j].y + v[j].z + v[j].w;
    dep_launch();
    const float mean = block_sum(s, red) / float(4 * d4);
    float q = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowV; ++j)
        if (threadIdx.x + j * blockDim.x < d4) {
            const float a = v[j].x - mean, c = v[j].y - mean, e = v[j].z - mean, f = v[j].w - mean;
            q += a * a + c * c + e * e + f * f;
        }
    const float inv = rsqrtf(block_sum(q, red) / float(4 * d4) + eps);
#pragma unroll
    for (int j = 0; j < kRowV; ++j) {
        const int k = threadIdx.x + j * blockDim.x;
        if (k >= d4) break;
        const float4 g = reinterpret_cast<const float4*>(w)[k], h = reinterpret_cast<const float4*>(b)[k];
        store_bf16x4(out + (base + k) * 4, (v[j].x - mean) * inv * g.x + h.x, (v[j].y - mean) * inv * g.y + h.y,
                     (v[j].z - mean) * inv * g.z + h.z, (v[j].w - mean) * inv * g.w + h.w);
    }
}

// add: a bias first added to the row in place (x += add), each element by the thread that normalises it.
__global__ void k_layer_norm(float* x, int d, const float* add, const float* w, const float* b, float eps, bf16* out) {
    __shared__ float red[32];
    float* r = x + int64_t(blockIdx.x) * d;
    if (add)
        for (int k = threadIdx.x; k < d; k += blockDim.x) r[k] += add[k];
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

// IDX: the index type, 32-bit wherever the element count allows (a 64-bit modulo costs dozens of instructions:
// the encoder stem's 17M-element call took 68 µs with it).
template <class IDX>
__global__ void k_bias_act(float* y, IDX total, int n, const float* bias, bool gelu, bf16* ob) {
    for (IDX i = blockIdx.x * IDX(blockDim.x) + threadIdx.x; i < total; i += IDX(gridDim.x) * blockDim.x) {
        float v = y[i] + (bias ? bias[i % n] : 0.0f);
        if (gelu) v = gelu_erf(v);
        y[i] = v;
        if (ob) ob[i] = __float2bfloat16(v);
    }
}

// k_bias_act four elements at a time (n a multiple of 4, 16-byte aligned rows): one index division per float4
// instead of per element, and write_y = false skips the float32 result where only the bf16 one is read next (the
// encoder's fc1 and proj1). ncu, H200, jfk 11 s: the encoder's 23 calls 167 → 108 µs.
__global__ void k_bias_act4(float* y, int total4, int n4, const float* bias, bool gelu, bf16* ob, bool write_y) {
    dep_wait();
    dep_launch();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += gridDim.x * blockDim.x) {
        float4 v = reinterpret_cast<const float4*>(y)[i];
        if (bias) {
            const float4 b = reinterpret_cast<const float4*>(bias)[i % n4];
            v.x += b.x, v.y += b.y, v.z += b.z, v.w += b.w;
        }
        if (gelu) v.x = gelu_erf(v.x), v.y = gelu_erf(v.y), v.z = gelu_erf(v.z), v.w = gelu_erf(v.w);
        if (write_y) reinterpret_cast<float4*>(y)[i] = v;
        if (ob) store_bf16x4(ob + int64_t(i) * 4, v.x, v.y, v.z, v.w);
    }
}

template <class IDX>
__global__ void k_swiglu(const float* gu, IDX total, int I, bf16* out) {
    for (IDX i = blockIdx.x * IDX(blockDim.x) + threadIdx.x; i < total; i += IDX(gridDim.x) * blockDim.x) {
        const IDX r = i / I, c = i % I;
        out[i] = __float2bfloat16(silu(gu[r * 2 * I + c]) * gu[r * 2 * I + I + c]);
    }
}

// SwiGLU of the prefill, one block per row, four columns per thread and step (no index division per element; was
// 3.8 µs per 158-row call, ncu).
__global__ void k_swiglu4(const float* gu, int I4, bf16* out) {
    dep_wait();
    const float4* g = reinterpret_cast<const float4*>(gu) + int64_t(blockIdx.x) * 2 * I4;
    const float4* u = g + I4;
    bf16* o = out + int64_t(blockIdx.x) * I4 * 4;
    for (int k = threadIdx.x; k < I4; k += blockDim.x) {
        const float4 a = g[k], c = u[k];
        store_bf16x4(o + int64_t(k) * 4, silu(a.x) * c.x, silu(a.y) * c.y, silu(a.z) * c.z, silu(a.w) * c.w);
    }
    dep_launch();
}

// q/k-norm + RoPE + the cache write: one warp per (row, head) over the q heads then the k heads; v heads are copied.
// HD = 128 (both Qwen3-ASR sizes): each lane holds its four values x[l], x[l+32], x[l+64], x[l+96] from one read;
// HD = 0: any even head_dim hd, the head read twice (sum of squares, then the rotation).
template <int HD, bool ROWS = false>
__global__ void k_qk_rope(const float* qkv, int n, const int* pos, int Hq, int Hkv, int hd, const float* qn,
                          const float* kn, float eps, const float* inv_freq, float* q_out, float* kc, float* vc,
                          RowsKv rk) {
    if constexpr (HD != 0) hd = HD;
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x % kWarp;
    const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
    const int H = Hq + 2 * Hkv;
    if (gw >= int64_t(n) * H) return;
    const int r = int(gw / H), h = int(gw % H);
    int p;
    if constexpr (ROWS) { // a batched step's row: its session's position and cache
        p = rk.rows->pos[r];
        const int64_t plane = rk.rows->cap[r] * Hkv * hd;
        kc = rk.rows->kv[r] + 2 * rk.layer * plane;
        vc = kc + plane;
    } else {
        p = (pos ? *pos : 0) + r;
    }
    const float* src = qkv + int64_t(r) * H * hd + int64_t(h) * hd;
    const bool isq = h < Hq, isv = h >= Hq + Hkv;
    const float* nw = isq ? qn : kn;
    float* dst = isv  ? vc + int64_t(p) * Hkv * hd + int64_t(h - Hq - Hkv) * hd
                 : isq ? q_out + int64_t(r) * Hq * hd + int64_t(h) * hd
                       : kc + int64_t(p) * Hkv * hd + int64_t(h - Hq) * hd;
    const int half = hd / 2;
    if constexpr (HD == 128) {
        float x[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) x[i] = src[lane + 32 * i];
        if (isv) {
#pragma unroll
            for (int i = 0; i < 4; ++i) dst[lane + 32 * i] = x[i];
            return;
        }
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) ss += x[i] * x[i];
        const float inv = rsqrtf(warp_sum(ss) / float(hd) + eps);
#pragma unroll
        for (int j = 0; j < 2; ++j) { // pairs (i, i + 64), i = lane + 32 j
            const int i = lane + 32 * j;
            const float x1 = x[j] * inv * nw[i], x2 = x[j + 2] * inv * nw[i + half];
            float sn, c;
            sincosf(float(p) * inv_freq[i], &sn, &c);
            dst[i] = x1 * c - x2 * sn;
            dst[i + half] = x2 * c + x1 * sn;
        }
    } else {
        if (isv) {
            for (int i = lane; i < hd; i += kWarp) dst[i] = src[i];
            return;
        }
        float ss = 0.0f;
        for (int i = lane; i < hd; i += kWarp) ss += src[i] * src[i];
        ss = warp_sum(ss);
        const float inv = rsqrtf(ss / float(hd) + eps);
        for (int i = lane; i < half; i += kWarp) {
            const float x1 = src[i] * inv * nw[i], x2 = src[i + half] * inv * nw[i + half];
            const float ang = float(p) * inv_freq[i];
            const float c = cosf(ang), sn = sinf(ang);
            dst[i] = x1 * c - x2 * sn;
            dst[i + half] = x2 * c + x1 * sn;
        }
    }
}

// Greedy choice in two kernels: each block reduces a slice to (max, lowest index of the max, Σexp(x − max));
// the final block merges the slices and writes the token.
constexpr int kArgBlocks = 132;
// One slice (block b of nb) of logits x [V]: its (max, lowest index of the max, Σexp(x − max)) into part[3b..].
__device__ __forceinline__ void argmax_slice(const float* x, int V, float* part, int nb, int b) {
    __shared__ float sv[32], ss[32];
    __shared__ int si[32];
    const int per = (V + nb - 1) / nb, lo = b * per, hi = min(V, lo + per);
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
        part[3 * b] = mx;
        part[3 * b + 1] = __int_as_float(si[0]);
        part[3 * b + 2] = hi > lo ? sum : 0.0f;
    }
}

__global__ void k_argmax_part(const float* x, int V, float* part) {
    QASR_TL_ENTRY
    dep_wait();
    QASR_TL_WAITED(kTlArgPart, false);
    dep_launch();
    argmax_slice(x, V, part, int(gridDim.x), int(blockIdx.x));
}

// The greedy choice per row of logits [rows, V]: slices (blockIdx.x) of row blockIdx.y, then one warp per row merges.
__global__ void k_argmax_rows_part(const float* x, int V, float* part) {
    dep_wait();
    dep_launch();
    argmax_slice(x + int64_t(blockIdx.y) * V, V, part + 3 * int64_t(gridDim.x) * blockIdx.y, int(gridDim.x),
                 int(blockIdx.x));
}

__global__ void k_argmax_rows_final(const float* part, int nparts, int2* out) {
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x;
    const float* p = part + 3 * int64_t(nparts) * blockIdx.x;
    float M;
    int id;
    merge_max_parts(p, nparts, 3, lane, M, id);
    float S = 0.0f;
    for (int q = lane; q < nparts; q += kWarp)
        if (p[3 * q + 2] > 0.0f) S += p[3 * q + 2] * expf(p[3 * q] - M);
    S = warp_sum(S);
    const bool valid = id != 0x7fffffff; // every logit NaN: no maximum
    if (lane == 0) out[blockIdx.x] = make_int2(valid ? id : -1, __float_as_int(valid ? -logf(S) : NAN));
}

// emb_out: the chosen token's embedding row (table emb) is written there too (the next step's input).
// xpart (the screened head's, head_screen.cu): nx (exact logit, index, Σ exp correction) partials choose the token
// and give its logit; part's (max, index, Σ exp) partials, over the proxy logits, and the corrections the normaliser.
__global__ void k_argmax_final(const float* x, const float* part, int nparts, int* tok, int* pos, int* count, int2* ring,
                               int ring_size, bool advance, DMat emb, float* emb_out, const float* xpart, int nx) {
    QASR_TL_ENTRY
    dep_wait();
    QASR_TL_WAITED(kTlArgFinal, false);
    dep_launch();
    // one warp: lane l takes the partials l, l + 32, … (their loads in flight together, not one thread's chain of
    // 2·nparts dependent loads: 12.9 µs alone on the H200), then the lowest index among the maxima and Σ l·e^(m−M)
    const int lane = threadIdx.x;
    float M, X;
    int id;
    merge_max_parts(part, nparts, 3, lane, M, id);
    if (xpart) merge_max_parts(xpart, nx, 3, lane, X, id);
    // no maximum at all (every logit NaN: a checkpoint with non-finite weights): the ring gets the sentinel, which the
    // host rejects with an error; nothing reads a row at it (the next step's input is row 0's, discarded)
    const bool valid = id != 0x7fffffff;
    if (emb_out) { // bf16 rows of 256·EC columns (the launcher's condition): every load in flight before any store
        constexpr int EC = 8;
        const int nc = int(emb.cols / 256);
        if (!valid) id = 0;
        const uint4* r = static_cast<const uint4*>(emb.data) + int64_t(id) * (emb.cols / 8);
        uint4 v[EC];
#pragma unroll
        for (int j = 0; j < EC; ++j)
            if (j < nc) v[j] = __ldg(r + lane + j * kWarp);
#pragma unroll
        for (int j = 0; j < EC; ++j) {
            if (j >= nc) break;
            float4* o = reinterpret_cast<float4*>(emb_out) + 2 * (lane + j * kWarp);
            o[0] = make_float4(bf(v[j].x & 0xffffu), bf(v[j].x >> 16), bf(v[j].y & 0xffffu), bf(v[j].y >> 16));
            o[1] = make_float4(bf(v[j].z & 0xffffu), bf(v[j].z >> 16), bf(v[j].w & 0xffffu), bf(v[j].w >> 16));
        }
    }
    float S = 0.0f;
    for (int p = lane; p < nparts; p += kWarp)
        if (part[3 * p + 2] > 0.0f) S += part[3 * p + 2] * expf(part[3 * p] - M);
    if (xpart) // the screen's rescored rows: their exact terms instead of the proxy's (relative to the same M)
        for (int p = lane; p < nx; p += kWarp) S += xpart[3 * p + 2];
    S = warp_sum(S);
    if (lane != 0) return;
    const float lp = valid ? ((xpart ? X : x[id]) - M) - logf(S) : NAN;
    *tok = valid ? id : 0;
    const int c = *count;
    ring[c % ring_size] = make_int2(valid ? id : -1, __float_as_int(lp));
    *count = c + 1;
    if (advance) *pos += 1;
}

__global__ void k_set_ints(int* p, int a, int b) {
    p[0] = a;
    p[1] = b;
}

} // namespace

bool matvec(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s, bool early) {
    MvArgs a{W.data, W.scales, W.biases, W.rows, int(W.cols), W.gs, x, norm_w, eps, y, int(epi), 0};
    if (epi == Epi::SwiGLU) {
        a.N = W.rows / 2;
        a.row_off = W.rows / 2;
    }
    if (W.cols % 16 != 0) fail("cuda", "matvec needs a multiple of 16 columns");
    if (matvec_prefetch(W, x, norm_w, eps, y, epi, s, early)) return true;
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
    if (row_fits(d, x, w, of, ob)) launch(k_rms_norm4, dim3(unsigned(rows)), dim3(row_threads(d / 4)), 0, s, x, d / 4, w, eps, of, ob);
    else k_rms_norm<<<unsigned(rows), 256, 0, s>>>(x, d, w, eps, of, ob);
    QASR_CUDA_LAUNCHED();
}

void layer_norm(const float* x, int rows, int d, const float* w, const float* b, float eps, bf16* out, cudaStream_t s) {
    if (rows <= 0) return;
    float* xw = const_cast<float*>(x); // not written (no bias to add)
    if (row_fits(d, x, w, b, out)) launch(k_layer_norm4, dim3(unsigned(rows)), dim3(row_threads(d / 4)), 0, s, xw, d / 4,
                                          static_cast<const float*>(nullptr), w, b, eps, out);
    else k_layer_norm<<<unsigned(rows), 256, 0, s>>>(xw, d, nullptr, w, b, eps, out);
    QASR_CUDA_LAUNCHED();
}

void add_layer_norm(float* x, int rows, int d, const float* add, const float* w, const float* b, float eps, bf16* out,
                    cudaStream_t s) {
    if (rows <= 0) return;
    if (row_fits(d, x, add, w, out) && row_fits(d, b, nullptr, nullptr, nullptr))
        launch(k_layer_norm4, dim3(unsigned(rows)), dim3(row_threads(d / 4)), 0, s, x, d / 4, add, w, b, eps, out);
    else k_layer_norm<<<unsigned(rows), 256, 0, s>>>(x, d, add, w, b, eps, out);
    QASR_CUDA_LAUNCHED();
}

void to_bf16(const float* x, size_t n, bf16* out, cudaStream_t s) {
    if (!n) return;
    k_to_bf16<<<grid_for(int64_t(n)), 256, 0, s>>>(x, n, out);
    QASR_CUDA_LAUNCHED();
}

void bias_act(float* y, int rows, int n, const float* bias, bool gelu, bf16* ob, cudaStream_t s, bool write_y) {
    const int64_t total = int64_t(rows) * n;
    if (!total) return;
    if (!write_y && !ob) fail("cuda", "bias_act: no output");
    const auto a16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (n % 4 == 0 && total / 4 <= INT32_MAX / 2 && a16(y) && (!bias || a16(bias)) && (!ob || reinterpret_cast<uintptr_t>(ob) % 8 == 0)) {
        launch(k_bias_act4, dim3(grid_for(total / 4)), dim3(256), 0, s, y, int(total / 4), n / 4, bias, gelu, ob, write_y);
    } else if (total <= INT32_MAX / 2) k_bias_act<int><<<grid_for(total), 256, 0, s>>>(y, int(total), n, bias, gelu, ob);
    else k_bias_act<int64_t><<<grid_for(total), 256, 0, s>>>(y, total, n, bias, gelu, ob);
    QASR_CUDA_LAUNCHED();
}

void swiglu_bf16(const float* gu, int rows, int I, bf16* out, cudaStream_t s) {
    const int64_t total = int64_t(rows) * I;
    if (!total) return;
    const auto al = [](const void* p, int n) { return reinterpret_cast<uintptr_t>(p) % n == 0; };
    if (I % 4 == 0 && rows <= 65535 * 8 && al(gu, 16) && al(out, 8))
        launch(k_swiglu4, dim3(unsigned(rows)), dim3(std::min(256, (I / 4 + kWarp - 1) / kWarp * kWarp)), 0, s, gu, I / 4, out);
    else if (total <= INT32_MAX / 4) k_swiglu<int><<<grid_for(total), 256, 0, s>>>(gu, int(total), I, out);
    else k_swiglu<int64_t><<<grid_for(total), 256, 0, s>>>(gu, total, I, out);
    QASR_CUDA_LAUNCHED();
}

void qk_norm_rope_kv(const float* qkv, int n, const int* pos, int Hq, int Hkv, int hd, const float* qn, const float* kn,
                     float eps, const float* inv_freq, float* q_out, float* kc, float* vc, cudaStream_t s, RowsKv rk) {
    const int64_t warps = int64_t(n) * (Hq + 2 * Hkv);
    if (!warps) return;
    if (rk.rows && n > BatchRows::kMax) fail("cuda", "qk_norm_rope_kv: more rows than a batched step holds");
    const dim3 grid(unsigned((warps * kWarp + 255) / 256));
    if (rk.rows)
        launch(hd == 128 ? k_qk_rope<128, true> : k_qk_rope<0, true>, grid, dim3(256), 0, s, qkv, n, pos, Hq, Hkv, hd, qn,
               kn, eps, inv_freq, q_out, kc, vc, rk);
    else
        launch(hd == 128 ? k_qk_rope<128> : k_qk_rope<0>, grid, dim3(256), 0, s, qkv, n, pos, Hq, Hkv, hd, qn, kn, eps,
               inv_freq, q_out, kc, vc, rk);
    QASR_CUDA_LAUNCHED();
}

bool argmax_can_embed(const DMat& emb) {
    return emb.bits == 16 && emb.cols % 256 == 0 && emb.cols <= 2048 && reinterpret_cast<uintptr_t>(emb.data) % 16 == 0;
}

void argmax_token(const float* logits, int V, float* scratch, int* tok, int* pos, int* count, int2* ring, int ring_size,
                  bool advance, cudaStream_t s, const DMat* emb, float* emb_out) {
    if (emb && !argmax_can_embed(*emb)) fail("cuda", "argmax: the embedding write needs bf16 rows of 256·n ≤ 2048 columns");
    launch(k_argmax_part, dim3(kArgBlocks), dim3(1024), 0, s, logits, V, scratch);
    launch(k_argmax_final, dim3(1), dim3(32), 0, s, logits, static_cast<const float*>(scratch), kArgBlocks, tok, pos, count,
           ring, ring_size, advance, emb ? *emb : DMat{}, emb ? emb_out : nullptr, static_cast<const float*>(nullptr), 0);
}

void argmax_merge(const float* logits, const float* part, int nparts, int* tok, int* pos, int* count, int2* ring,
                  int ring_size, bool advance, cudaStream_t s, const DMat* emb, float* emb_out, const float* xpart, int nx) {
    if (emb && !argmax_can_embed(*emb)) fail("cuda", "argmax: the embedding write needs bf16 rows of 256·n ≤ 2048 columns");
    if (xpart && nx <= 0) fail("cuda", "argmax: exact partials without a count");
    launch(k_argmax_final, dim3(1), dim3(32), 0, s, logits, part, nparts, tok, pos, count, ring, ring_size, advance,
           emb ? *emb : DMat{}, emb ? emb_out : nullptr, xpart, xpart ? nx : 0);
}

void argmax_rows(const float* logits, int n, int V, float* scratch, int2* out, cudaStream_t s) {
    if (n <= 0) return;
    launch(k_argmax_rows_part, dim3(kArgRowParts, unsigned(n)), dim3(1024), 0, s, logits, V, scratch);
    launch(k_argmax_rows_final, dim3(unsigned(n)), dim3(kWarp), 0, s, static_cast<const float*>(scratch), kArgRowParts, out);
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
