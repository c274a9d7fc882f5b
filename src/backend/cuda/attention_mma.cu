// Many-row attention (prefill, encoder) on the tensor cores: mma.sync m16n8k8 with TF32 inputs and float32
// accumulation (sm_80+). Block = (tile of 16 query rows, head), 4 warps; the warps take the tile's 32-key tiles (40
// where that saves the longest row tile a round) in turn, each keeping an online softmax of its own, and merge (max, sum, output) through shared memory at the end.
// A warp copies its key tile into its own shared buffer with cp.async (all loads in flight at once), computes the
// scores, copies the value tile into the same buffer while it does the softmax, then the output product; q stays in
// registers. (Fragments loaded straight from L2 measured about the same, 399 vs 428 µs over a 0.6B prefill's 28
// layers before the instruction cuts below, with 255 registers instead of 204.)
//
// Index maps (any bijection works as long as both operands of a product use the same one):
//  - Q·Kᵀ: the contraction index k of k-step s held by lane (g = lane / 4, t = lane % 4) is dimension
//    16·(s / 2) + 4t + 2·(s % 2) (k = t) and the next one (k = t + 4), so a lane reads one float4 of its q row and of
//    its key row per two k-steps. Column n of an 8-key group is key n / 2 + 4·(n % 2), so the score fragment holds
//    keys t and t + 4 of each group (and the shared-memory reads are conflict-free with rows of HD + 4 floats).
//  - P·V: P's fragment is used as the A operand as it is: the contraction index k = t is key t, k = t + 4 key t + 4;
//    the output column n of n-tile j is dimension NT·n + j (NT = HD / 8), so a lane reads contiguous float4s of its
//    two value rows and ends holding the 2·NT contiguous output dims from 2t·NT.
// TF32 keeps 10 mantissa bits (bf16: 7): q and the weights P are rounded to it, the keys and values truncated (the
// tensor core ignores the low bits; a conversion per element was a quarter of a tile's instructions), and the
// softmax runs in log2 units on the MUFU's exp2. The output stays within ~1e-3 of float32 arithmetic, below the bf16
// rounding of the output that the o product reads. (ncu, 158-row prefill layer: the block of the last row tile, one
// or two warps per scheduler, issues an instruction every ~7 cycles: its instruction count is its time.)
// Biases (encoder): bq is added to q as it is loaded, bk is left out (q·bk is the same for every key of a row, and
// softmax is invariant to it), bv is added to the output (the weights sum to one).
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kMmaRows = 16, kMmaWarps = 4;

__device__ __forceinline__ uint32_t tf32(float x) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// 2^x (MUFU, relative error ~2^-22; −inf → 0)
__device__ __forceinline__ float exp2_fast(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}
// a float32 as a TF32 operand without rounding: the tensor core ignores the 13 low mantissa bits (truncation, at most
// 2^-10 relative; the keys and values, whose cvt per element was a quarter of a tile's instructions)
__device__ __forceinline__ uint32_t tf32_trunc(float x) { return __float_as_uint(x); }

// c += a · b, m16n8k8, TF32 operands, float32 accumulators
__device__ __forceinline__ void mma_tf32(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst)), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
#endif
}

// shared row stride (floats) of a staged key/value tile: ≡ 4 (mod 32) makes the fragment loads conflict-free
template <int HD> __host__ __device__ constexpr int mma_row_stride() { return HD + 4; }
template <int HD, int KT> constexpr size_t mma_smem_bytes() { return size_t(kMmaWarps) * KT * mma_row_stride<HD>() * 4; }

template <int HD, int KT, bool BIAS>
__global__ void __launch_bounds__(kMmaWarps * kWarp) k_attention_mma(AttnArgs a) {
    static_assert(KT % 8 == 0 && KT >= kMmaRows, "key tiles of whole 8-key groups, at least 16 (the partial outputs overlay them)");
    constexpr int NG = KT / 8; // 8-key groups of a tile
    constexpr int KQ = HD / 16; // float4s of a row per lane in Q·Kᵀ (two k-steps each)
    constexpr int NT = HD / 8;  // output n-tiles
    constexpr int RS = mma_row_stride<HD>();
    // per warp: its key tile, then its value tile ([KT][RS]); after the loop the partial outputs [16][RS]
    extern __shared__ __align__(16) float smem[];
    __shared__ float Ms[kMmaWarps][kMmaRows], Ls[kMmaWarps][kMmaRows];
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
    const int r0 = int(blockIdx.x) * kMmaRows, h = blockIdx.y, kvh = h / (a.heads / a.kv_heads);
    const int past = a.causal && a.past ? *a.past : 0;
    auto range = [&](int r, int& lo, int& hi) { // keys of query row r (none past the last row)
        if (r >= a.n) lo = hi = 0;
        else if (a.causal) lo = 0, hi = past + r + 1;
        else lo = (r / a.window) * a.window, hi = min(lo + a.window, a.n);
    };
    int klo, khi, lo0, hi0, lo1, hi1, tmp;
    range(r0, klo, tmp);
    range(min(a.n, r0 + kMmaRows) - 1, tmp, khi);
    range(r0 + g, lo0, hi0);
    range(r0 + g + 8, lo1, hi1);
    float* buf = smem + w * KT * RS;
    const float* kb = a.k + int64_t(kvh) * HD;
    const float* vb = a.v + int64_t(kvh) * HD;
    auto stage = [&](const float* base, int kt) { // rows kt .. kt + KT − 1 (clamped to the last key) → buf
#pragma unroll 4
        for (int i = lane; i < KT * HD / 4; i += kWarp) {
            const int j = i / (HD / 4), c = (i % (HD / 4)) * 4;
            cp_async16(buf + j * RS + c, base + int64_t(min(kt + j, khi - 1)) * a.kv_stride + c);
        }
    };
    int kt = klo + w * KT;
    if (kt < khi) stage(kb, kt);
    // q fragments (scaled, TF32): qa[c][0..3] = row g dims 16c + 4t .. + 3, qb the same of row g + 8
    const float scale = rsqrtf(float(HD)) * 1.4426950408889634f; // scores in log2 units: exp2 below
    uint32_t qa[KQ][4], qb[KQ][4];
    {
        const float* q0 = a.q + int64_t(min(r0 + g, a.n - 1)) * a.q_stride + int64_t(h) * HD + 4 * t;
        const float* q1 = a.q + int64_t(min(r0 + g + 8, a.n - 1)) * a.q_stride + int64_t(h) * HD + 4 * t;
#pragma unroll
        for (int c = 0; c < KQ; ++c) {
            float4 x = *reinterpret_cast<const float4*>(q0 + 16 * c), y = *reinterpret_cast<const float4*>(q1 + 16 * c);
            if constexpr (BIAS) {
                const float4 b = *reinterpret_cast<const float4*>(a.bq + h * HD + 16 * c + 4 * t);
                x.x += b.x, x.y += b.y, x.z += b.z, x.w += b.w;
                y.x += b.x, y.y += b.y, y.z += b.z, y.w += b.w;
            }
            qa[c][0] = tf32(x.x * scale), qa[c][1] = tf32(x.y * scale), qa[c][2] = tf32(x.z * scale), qa[c][3] = tf32(x.w * scale);
            qb[c][0] = tf32(y.x * scale), qb[c][1] = tf32(y.y * scale), qb[c][2] = tf32(y.z * scale), qb[c][3] = tf32(y.w * scale);
        }
    }
    float o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // rows g, g + 8 (l: this lane's share)
    // column n of an 8-key group's score tile is key pi(n) = n / 2 + 4·(n % 2): lane t's scores are keys t, t + 4
    const int pg = g / 2 + 4 * (g % 2);
    for (; kt < khi; kt += kMmaWarps * KT) {
        cp_async_wait_all();
        __syncwarp();
        float s[NG][4]; // per 8-key group n: (row g, key t), (g, t + 4), (g + 8, t), (g + 8, t + 4)
#pragma unroll
        for (int n = 0; n < NG; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
            const float* kr = buf + (8 * n + pg) * RS + 4 * t;
#pragma unroll
            for (int c = 0; c < KQ; ++c) {
                const float4 kv = *reinterpret_cast<const float4*>(kr + 16 * c);
                mma_tf32(s[n], qa[c][0], qb[c][0], qa[c][1], qb[c][1], tf32_trunc(kv.x), tf32_trunc(kv.y));
                mma_tf32(s[n], qa[c][2], qb[c][2], qa[c][3], qb[c][3], tf32_trunc(kv.z), tf32_trunc(kv.w));
            }
        }
        __syncwarp(); // every lane has read the keys: the values go into the same buffer
        stage(vb, kt);
        // mask, then the online softmax per row (a row's KT scores of this tile are spread over a quad)
        float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
        for (int n = 0; n < NG; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = kt + 8 * n + t + 4 * e;
                if (key < lo0 || key >= hi0) s[n][e] = -INFINITY;
                if (key < lo1 || key >= hi1) s[n][2 + e] = -INFINITY;
                mx0 = fmaxf(mx0, s[n][e]);
                mx1 = fmaxf(mx1, s[n][2 + e]);
            }
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
        // rescale factors (a row without keys so far keeps m = −inf and its zeros)
        const float f0 = n0 == -INFINITY ? 1.0f : exp2_fast(m0 - n0), f1 = n1 == -INFINITY ? 1.0f : exp2_fast(m1 - n1);
        m0 = n0, m1 = n1;
        l0 *= f0, l1 *= f1;
#pragma unroll
        for (int j = 0; j < NT; ++j) o[j][0] *= f0, o[j][1] *= f0, o[j][2] *= f1, o[j][3] *= f1;
        uint32_t p[NG][4];
#pragma unroll
        for (int n = 0; n < NG; ++n) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const float pa = s[n][e] == -INFINITY ? 0.0f : exp2_fast(s[n][e] - n0);
                const float pb = s[n][2 + e] == -INFINITY ? 0.0f : exp2_fast(s[n][2 + e] - n1);
                l0 += pa, l1 += pb;
                p[n][e] = tf32(pa), p[n][2 + e] = tf32(pb);
            }
        }
        cp_async_wait_all();
        __syncwarp();
        // O += P · V: the score fragment is the A operand as it is (k = t: key t, k = t + 4: key t + 4)
#pragma unroll
        for (int n = 0; n < NG; ++n) {
            const float* v0 = buf + (8 * n + t) * RS + NT * g;
            const float* v1 = v0 + 4 * RS;
#pragma unroll
            for (int c = 0; c < NT / 4; ++c) {
                const float4 x = *reinterpret_cast<const float4*>(v0 + 4 * c), y = *reinterpret_cast<const float4*>(v1 + 4 * c);
                mma_tf32(o[4 * c + 0], p[n][0], p[n][2], p[n][1], p[n][3], tf32_trunc(x.x), tf32_trunc(y.x));
                mma_tf32(o[4 * c + 1], p[n][0], p[n][2], p[n][1], p[n][3], tf32_trunc(x.y), tf32_trunc(y.y));
                mma_tf32(o[4 * c + 2], p[n][0], p[n][2], p[n][1], p[n][3], tf32_trunc(x.z), tf32_trunc(y.z));
                mma_tf32(o[4 * c + 3], p[n][0], p[n][2], p[n][1], p[n][3], tf32_trunc(x.w), tf32_trunc(y.w));
            }
        }
        __syncwarp(); // every lane has read the values: the next key tile goes into the buffer
        if (kt + kMmaWarps * KT < khi) stage(kb, kt + kMmaWarps * KT);
    }
    // this warp's partials → shared memory (rows g and g + 8; dims 2t·NT + j and (2t + 1)·NT + j of n-tile j)
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    if (t == 0) Ms[w][g] = m0, Ms[w][g + 8] = m1, Ls[w][g] = l0, Ls[w][g + 8] = l1;
    __syncthreads(); // the partial outputs overlay the other warps' tiles
    float* Os = smem + w * kMmaRows * RS;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        Os[g * RS + 2 * t * NT + j] = o[j][0];
        Os[g * RS + (2 * t + 1) * NT + j] = o[j][1];
        Os[(g + 8) * RS + 2 * t * NT + j] = o[j][2];
        Os[(g + 8) * RS + (2 * t + 1) * NT + j] = o[j][3];
    }
    __syncthreads();
    // merge: thread → (row, HD / 8 dims)
    constexpr int DPT = HD / 8;
    const int row = threadIdx.x / 8, d0 = (threadIdx.x % 8) * DPT, r = r0 + row;
    if (r >= a.n) return;
    float M = -INFINITY;
#pragma unroll
    for (int u = 0; u < kMmaWarps; ++u) M = fmaxf(M, Ms[u][row]);
    float e[kMmaWarps], L = 0.0f;
#pragma unroll
    for (int u = 0; u < kMmaWarps; ++u) {
        e[u] = Ms[u][row] == -INFINITY ? 0.0f : exp2_fast(Ms[u][row] - M);
        L += Ls[u][row] * e[u];
    }
    const float inv = L > 0.0f ? 1.0f / L : 0.0f;
#pragma unroll
    for (int d = 0; d < DPT; d += 4) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < kMmaWarps; ++u) {
            const float4 x = *reinterpret_cast<const float4*>(smem + (u * kMmaRows + row) * RS + d0 + d);
            acc.x += x.x * e[u], acc.y += x.y * e[u], acc.z += x.z * e[u], acc.w += x.w * e[u];
        }
        acc.x *= inv, acc.y *= inv, acc.z *= inv, acc.w *= inv;
        if constexpr (BIAS) {
            const float4 b = *reinterpret_cast<const float4*>(a.bv + kvh * HD + d0 + d);
            acc.x += b.x, acc.y += b.y, acc.z += b.z, acc.w += b.w;
        }
        const int64_t at = int64_t(r) * a.o_stride + int64_t(h) * HD + d0 + d;
        if (a.ob) {
            store_bf16x4(a.ob + at, acc.x, acc.y, acc.z, acc.w);
        } else {
            *reinterpret_cast<float4*>(a.o + at) = acc;
        }
    }
}

} // namespace

// compute capability ≥ 8.0 of the current device (cached per device ordinal)
bool device_has_mma() {
    static std::atomic<int> cached[64] = {}; // read by the front worker's thread too
    int dev = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return false;
    if (!cached[dev].load(std::memory_order_relaxed)) {
        int major = 0;
        QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        cached[dev].store(major >= 8 ? 1 : 2, std::memory_order_relaxed);
    }
    return cached[dev].load(std::memory_order_relaxed) == 1;
}

namespace {
bool g_mma = [] { // QASR_CUDA_ATTN_MMA=0 keeps the float32 tiled kernel (A/B)
    const char* e = std::getenv("QASR_CUDA_ATTN_MMA");
    return !(e && std::string(e) == "0");
}();
} // namespace

static bool g_kt40 = [] { // QASR_CUDA_ATTN_KT40=0: 32-key tiles always (A/B)
    const char* e = std::getenv("QASR_CUDA_ATTN_KT40");
    return !(e && std::string(e) == "0");
}();

void set_attention_mma(bool on) { g_mma = on; }
void set_attention_kt40(bool on) { g_kt40 = on; }

bool attention_mma(const AttnArgs& a, cudaStream_t s) {
    if (!g_mma || !attention_tiled(a) || !device_has_mma()) return false;
    const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    if (!aligned(a.q) || !aligned(a.k) || !aligned(a.v) || (a.o && !aligned(a.o)) || a.o_stride % 4 != 0 ||
        reinterpret_cast<uintptr_t>(a.ob) % 8 != 0)
        return false;
    const dim3 grid(unsigned((a.n + kMmaRows - 1) / kMmaRows), unsigned(a.heads)), block(kMmaWarps * kWarp);
    auto go = [&](void (*k)(AttnArgs), size_t smem) {
        // the opt-in above 48 KB of dynamic shared memory, once per (device, kernel)
        static std::mutex mu;
        static std::set<std::pair<int, const void*>> done;
        int dev = 0;
        QASR_CUDA(cudaGetDevice(&dev));
        {
            std::lock_guard<std::mutex> lk(mu);
            const std::pair<int, const void*> key{dev, reinterpret_cast<const void*>(k)};
            if (!done.count(key)) {
                QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
                done.insert(key);
            }
        }
        launch(k, grid, block, smem, s, a);
    };
    // Key tiles of 40 instead of 32 where that takes the block of the longest rows one round of its 4 warps fewer
    // (prefill of 129–160 keys, 257–320, …: the longest row tile sets the kernel's time).
    const int keys = a.causal ? std::max(a.keys_hint, a.n) : std::min(a.window, a.n);
    const auto rounds = [&](int kt) { return (keys + kMmaWarps * kt - 1) / (kMmaWarps * kt); };
    const bool wide = g_kt40 && rounds(40) < rounds(32);
    const bool bias = a.bq != nullptr;
    if (a.hd == 128) {
        if (wide) bias ? go(k_attention_mma<128, 40, true>, mma_smem_bytes<128, 40>()) : go(k_attention_mma<128, 40, false>, mma_smem_bytes<128, 40>());
        else bias ? go(k_attention_mma<128, 32, true>, mma_smem_bytes<128, 32>()) : go(k_attention_mma<128, 32, false>, mma_smem_bytes<128, 32>());
    } else {
        if (wide) bias ? go(k_attention_mma<64, 40, true>, mma_smem_bytes<64, 40>()) : go(k_attention_mma<64, 40, false>, mma_smem_bytes<64, 40>());
        else bias ? go(k_attention_mma<64, 32, true>, mma_smem_bytes<64, 32>()) : go(k_attention_mma<64, 32, false>, mma_smem_bytes<64, 32>());
    }
    return true;
}

} // namespace qasr::cuda
