// The matrix products of a batched decode step (DeviceBatch: one row per session, B ≤ 16) on the tensor cores.
//
// cuBLAS runs these skinny products (M = B rows) at ~1 TB/s of weights with split-K reductions after them, and the
// step around them needs a norm, a conversion and an activation kernel per product: ~11 kernels per layer. Here
// one kernel per product: RMSNorm of its input rows and their rounding to bf16 (the operands the row passes give
// cuBLAS), the product, and the epilogue (store, residual add, SwiGLU) — 5 kernels per layer with the fused
// attention.
//
// mma.m16n8k16 (bf16 → float32): A = the B input rows (16 with zero padding), B = 8 rows of W (its columns n), so a
// warp's accumulator is 16 input rows × 8 output rows. A block of 8 warps owns tiles of 8 output rows; warp w takes
// the K-slice [w·K/8, (w+1)·K/8), and the warps' partial tiles are summed in shared memory in warp order
// (deterministic). Lane (g, t) = (lane / 4, lane % 4) loads W row g's 16 bytes at 8t of each 32-column step — the
// 4 lanes of a row read its 64 contiguous bytes — and uses them as the B fragments of two mma's: the k order
// within a step is permuted the same way for A (x from shared memory), which leaves the sum a dot product. The
// first step group's weights are loaded before the dependency wait (programmatic dependent launch): the weights
// of the next product stream in while the previous kernel finishes.
//
// MLX affine-quantized weights (4/6/8 bits): a lane loads the codes of the same 8 columns (4, 6 or 8 bytes) and
// its row's scale and bias of their group, and dequantizes them to bf16(scale·q + bias) in registers — the values
// dequant_bf16 gives the cuBLAS path — before the same two mma's. q becomes a float without a conversion
// instruction: its bits under the exponent of 2^23, minus 2^23.
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include "core/error.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kRpWarps = 8, kRpThreads = kRpWarps * kWarp;
constexpr int kRpRows = kRowsProductMaxRows; // input rows of the mma's A (B ≤ 16, zero-padded)
constexpr int kRpGroup = 8;   // 32-column steps whose weights a lane has in flight at once
constexpr int kRpPad = 32;    // bf16 elements of padding per staged row: lanes (g, t) hit distinct banks

struct RpArgs {
    const uint8_t* w;      // bf16 values, or MLX codes (rows of K·bits/8 bytes)
    const uint16_t* scales; // quantized: bf16 per (row, group of gs columns)
    const uint16_t* biases;
    int gs;
    int64_t N;     // output rows (SwiGLU: the gate rows; the up rows follow at N)
    int K, B;
    const float* x; // [B, K]
    const float* norm_w;
    float eps;
    float* y;      // [B, ldy]
    int ldy;
    int64_t tiles; // N / 8
    int early;     // trigger the successor's launch after the wait (else at the end)
};

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}

// A lane's 8 consecutive weights of one 32-column step as loaded: bf16 values, or MLX codes (8 × BITS bits) with
// the scale and bias of their group (bf16 bits: scale | bias << 16).
template <int BITS> struct RpRaw;
template <> struct RpRaw<16> { uint4 v; };
template <> struct RpRaw<8> { uint2 v; uint32_t sb; };
template <> struct RpRaw<6> { uint32_t lo, hi; uint32_t sb; }; // 48 bits: 3 halfwords (the offset is 6-byte aligned)
template <> struct RpRaw<4> { uint32_t v; uint32_t sb; };

template <int BITS>
__device__ __forceinline__ RpRaw<BITS> rp_load(const RpArgs& a, int64_t row, int col) {
    RpRaw<BITS> r;
    const uint8_t* p = a.w + row * (int64_t(a.K) * BITS / 8) + int64_t(col) * BITS / 8;
    if constexpr (BITS == 16) r.v = __ldg(reinterpret_cast<const uint4*>(p));
    else if constexpr (BITS == 8) r.v = __ldg(reinterpret_cast<const uint2*>(p));
    else if constexpr (BITS == 4) r.v = __ldg(reinterpret_cast<const uint32_t*>(p));
    else {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
        r.lo = uint32_t(__ldg(h)) | uint32_t(__ldg(h + 1)) << 16, r.hi = __ldg(h + 2);
    }
    if constexpr (BITS != 16) {
        const int64_t gi = row * (a.K / a.gs) + col / a.gs;
        r.sb = uint32_t(__ldg(a.scales + gi)) | uint32_t(__ldg(a.biases + gi)) << 16;
    }
    return r;
}

// Code j (0 … 7) of the 8 as float (exact: its bits under 2^23's exponent, minus 2^23).
template <int BITS> __device__ __forceinline__ float rp_code(const RpRaw<BITS>& r, int j) {
    uint32_t q;
    if constexpr (BITS == 8) q = __byte_perm(j < 4 ? r.v.x : r.v.y, 0x4B000000u, 0x7540u | unsigned(j & 3));
    else if constexpr (BITS == 4) q = ((r.v >> (4 * j)) & 15u) | 0x4B000000u;
    else {
        const uint64_t v = uint64_t(r.lo) | uint64_t(r.hi) << 32;
        q = (uint32_t(v >> (6 * j)) & 63u) | 0x4B000000u;
    }
    return __uint_as_float(q) - 8388608.0f;
}

// The 8 weights as 4 bf16 pairs (the mma's B fragments).
template <int BITS> __device__ __forceinline__ uint4 rp_weights(const RpRaw<BITS>& r) {
    if constexpr (BITS == 16) {
        return r.v;
    } else {
        const float sc = __uint_as_float(r.sb << 16), bi = __uint_as_float(r.sb & 0xFFFF0000u);
        uint32_t o[4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
            o[i] = pack_bf16(fmaf(sc, rp_code<BITS>(r, 2 * i), bi), fmaf(sc, rp_code<BITS>(r, 2 * i + 1), bi));
        return make_uint4(o[0], o[1], o[2], o[3]);
    }
}

// P = 2 for SwiGLU (gate and up tiles share the A fragments).
template <int EPI, int BITS>
__global__ void __launch_bounds__(kRpThreads, 2) k_rows_product(RpArgs a) {
    constexpr int P = EPI == int(Epi::SwiGLU) ? 2 : 1;
    extern __shared__ __align__(16) uint16_t xs[]; // [16][K + kRpPad] bf16
    __shared__ float red[kRpWarps][P][kRpRows][8];
    const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
    const int K = a.K, XS = K + kRpPad, KW = K / kRpWarps, NI = KW / 32;
    const int kw0 = warp * KW + 8 * t;
    RpRaw<BITS> wv[P][kRpGroup];
    const auto issue = [&](int64_t tile, int i0) {
#pragma unroll
        for (int p = 0; p < P; ++p) {
            const int64_t row = tile * 8 + g + p * a.N;
#pragma unroll
            for (int j = 0; j < kRpGroup; ++j)
                if (i0 + j < NI) wv[p][j] = rp_load<BITS>(a, row, kw0 + (i0 + j) * 32);
        }
    };
    if (int64_t(blockIdx.x) < a.tiles) issue(blockIdx.x, 0); // before the wait: weights do not depend on it
    dep_wait();
    if (a.early) dep_launch(); // the successor's blocks may take SMs this kernel leaves (its own wait keeps order)
    // the input rows, RMS-normalised (norm_w) and rounded to bf16, into shared memory; warp w stages rows w, w + 8
    for (int r = warp; r < kRpRows; r += kRpWarps) {
        uint16_t* dst = xs + r * XS;
        if (r >= a.B) {
            for (int k = lane * 8; k < K; k += kWarp * 8) *reinterpret_cast<uint4*>(dst + k) = make_uint4(0, 0, 0, 0);
            continue;
        }
        const float4* src = reinterpret_cast<const float4*>(a.x + int64_t(r) * K);
        float inv = 1.0f;
        if (a.norm_w) {
            float ss = 0.0f;
            for (int k = lane; k < K / 4; k += kWarp) {
                const float4 v = src[k];
                ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
            inv = rsqrtf(warp_sum(ss) / float(K) + a.eps);
        }
        for (int k = lane; k < K / 4; k += kWarp) {
            float4 v = src[k];
            if (a.norm_w) {
                const float4 nw = reinterpret_cast<const float4*>(a.norm_w)[k];
                v = make_float4(v.x * inv * nw.x, v.y * inv * nw.y, v.z * inv * nw.z, v.w * inv * nw.w);
            }
            *reinterpret_cast<uint2*>(dst + 4 * k) = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
        }
    }
    __syncthreads();
    const uint16_t* xa_row = xs + g * XS + kw0;
    const uint16_t* xb_row = xs + (g + 8) * XS + kw0;
    for (int64_t tile = blockIdx.x; tile < a.tiles; tile += gridDim.x) {
        float c[P][4] = {};
        for (int i0 = 0; i0 < NI; i0 += kRpGroup) {
            if (tile != int64_t(blockIdx.x) || i0 != 0) issue(tile, i0);
#pragma unroll
            for (int j = 0; j < kRpGroup; ++j) {
                if (i0 + j >= NI) break;
                const uint4 xa = *reinterpret_cast<const uint4*>(xa_row + (i0 + j) * 32);
                const uint4 xb = *reinterpret_cast<const uint4*>(xb_row + (i0 + j) * 32);
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    const uint4 wb = rp_weights<BITS>(wv[p][j]);
                    mma_bf16(c[p], xa.x, xb.x, xa.y, xb.y, wb.x, wb.y);
                    mma_bf16(c[p], xa.z, xb.z, xa.w, xb.w, wb.z, wb.w);
                }
            }
        }
        // c[p]: (input row g, output 2t, 2t+1), (input row g + 8, output 2t, 2t+1)
#pragma unroll
        for (int p = 0; p < P; ++p) {
            red[warp][p][g][2 * t] = c[p][0];
            red[warp][p][g][2 * t + 1] = c[p][1];
            red[warp][p][g + 8][2 * t] = c[p][2];
            red[warp][p][g + 8][2 * t + 1] = c[p][3];
        }
        __syncthreads();
        if (threadIdx.x < kRpRows * 8) {
            const int b = threadIdx.x / 8, j = threadIdx.x % 8;
            float v[P];
#pragma unroll
            for (int p = 0; p < P; ++p) {
                v[p] = 0.0f;
                for (int w = 0; w < kRpWarps; ++w) v[p] += red[w][p][b][j];
            }
            if (b < a.B) {
                float* y = a.y + int64_t(b) * a.ldy + tile * 8 + j;
                if constexpr (EPI == int(Epi::Store)) *y = v[0];
                else if constexpr (EPI == int(Epi::Add)) *y += v[0];
                else *y = silu(v[0]) * v[P - 1];
            }
        }
        __syncthreads();
    }
    if (!a.early) dep_launch();
}

size_t rp_smem(int K) { return size_t(kRpRows) * (K + kRpPad) * 2; }

// k_rows_product<EPI, BITS> with its dynamic shared memory opted in (once per device and size), launched
template <int EPI, int BITS> void launch_rows_product(const RpArgs& a, unsigned grid, cudaStream_t s) {
    static std::mutex mu;
    static std::set<std::pair<int, size_t>> done; // (device, bytes) opted in
    int dev = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    const size_t sm = rp_smem(a.K);
    {
        std::lock_guard<std::mutex> lk(mu);
        if (sm > 48 * 1024 && !done.count({dev, sm})) {
            QASR_CUDA(cudaFuncSetAttribute(k_rows_product<EPI, BITS>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm)));
            done.insert({dev, sm});
        }
    }
    launch(k_rows_product<EPI, BITS>, dim3(grid), dim3(kRpThreads), sm, s, a);
}

template <int BITS> void launch_rows_product(Epi epi, const RpArgs& a, unsigned grid, cudaStream_t s) {
    switch (epi) {
    case Epi::Store: launch_rows_product<int(Epi::Store), BITS>(a, grid, s); break;
    case Epi::Add: launch_rows_product<int(Epi::Add), BITS>(a, grid, s); break;
    case Epi::SwiGLU: launch_rows_product<int(Epi::SwiGLU), BITS>(a, grid, s); break;
    }
}

// The current device's largest shared memory per block (opt-in), cached per device: the staged rows must fit
// (K = 6144, the 1.7B down product, needs 197 KB: an H100/H200 has 227, an A100 163, an sm_89 GPU 99).
size_t smem_optin() {
    static std::atomic<int> cached[64] = {};
    int dev = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return 0;
    if (!cached[dev].load(std::memory_order_relaxed)) {
        int v = 0;
        QASR_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        cached[dev].store(std::max(v, 1), std::memory_order_relaxed);
    }
    return size_t(cached[dev].load(std::memory_order_relaxed));
}

} // namespace

bool rows_product_applies(const DMat& W, int B, Epi epi) {
    const int64_t N = epi == Epi::SwiGLU ? W.rows / 2 : W.rows;
    // a lane's 8 codes are one aligned load (6-bit: halfwords); their columns lie in one group
    const bool quant = (W.bits == 8 || W.bits == 6 || W.bits == 4) && W.scales && W.biases && W.gs >= 8 &&
                       W.gs % 8 == 0 && W.cols % W.gs == 0;
    const int align = W.bits == 16 ? 16 : W.bits == 8 ? 8 : W.bits == 4 ? 4 : 2;
    constexpr size_t kStatic = sizeof(float) * kRpWarps * 2 * kRpRows * 8; // red[] of the SwiGLU kernel
    return (W.bits == 16 || quant) && B >= 1 && B <= kRpRows && W.cols % 256 == 0 && W.cols <= 6144 && N % 8 == 0 &&
           N > 0 && reinterpret_cast<uintptr_t>(W.data) % align == 0 && device_has_mma() &&
           rp_smem(int(W.cols)) + kStatic <= smem_optin();
}

bool rows_product(const DMat& W, const float* x, int B, const float* norm_w, float eps, float* y, int ldy, Epi epi,
                  cudaStream_t s) {
    if (!rows_product_applies(W, B, epi)) return false;
    RpArgs a;
    a.w = static_cast<const uint8_t*>(W.data);
    a.scales = reinterpret_cast<const uint16_t*>(W.scales), a.biases = reinterpret_cast<const uint16_t*>(W.biases);
    a.gs = W.gs;
    a.N = epi == Epi::SwiGLU ? W.rows / 2 : W.rows;
    a.K = int(W.cols), a.B = B, a.x = x, a.norm_w = norm_w, a.eps = eps, a.y = y, a.ldy = ldy;
    a.tiles = a.N / 8;
    static const int early = [] { // QASR_CUDA_ROWS_EARLY=0: trigger at the end (A/B)
        const char* e = std::getenv("QASR_CUDA_ROWS_EARLY");
        return e && std::string(e) == "0" ? 0 : 1;
    }();
    a.early = early;
    // one wave (two blocks fit an SM), tiles beyond that in turn: the input rows are staged once a block
    int dev = 0, sms = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    static const int per_sm = [] { // QASR_CUDA_ROWS_BLOCKS=n: blocks per SM (A/B)
        const char* e = std::getenv("QASR_CUDA_ROWS_BLOCKS");
        return e && std::atoi(e) > 0 ? std::atoi(e) : 2;
    }();
    const unsigned grid = unsigned(std::min<int64_t>(a.tiles, int64_t(sms) * per_sm));
    switch (W.bits) {
    case 16: launch_rows_product<16>(epi, a, grid, s); break;
    case 8: launch_rows_product<8>(epi, a, grid, s); break;
    case 6: launch_rows_product<6>(epi, a, grid, s); break;
    default: launch_rows_product<4>(epi, a, grid, s); break;
    }
    return true;
}

} // namespace qasr::cuda
