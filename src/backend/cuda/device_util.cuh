// Device helpers shared by the CUDA kernel files: warp/block reductions, bf16 widening, activations, MLX code
// extraction, programmatic-dependent-launch controls, and the launch helper.
#pragma once
#include "backend/cuda/check.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <utility>

namespace qasr::cuda {

bool pdl_enabled(); // set_pdl() (kernels.cuh)

namespace detail {

constexpr int kWarp = 32;

// Programmatic dependent launch (Hopper): kernels of the decode step are launched with programmatic stream
// serialization, so kernel n+1 is scheduled while kernel n drains; it may prefetch its (read-only) weights, then
// waits in dep_wait() for kernel n's results. dep_launch() lets the next kernel start once every block got here.
__device__ __forceinline__ void dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void dep_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// sm_90 bulk copies (cp.async.bulk) into shared memory, completing on an mbarrier (transaction bytes).
[[maybe_unused]] __device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ void mbar_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(dst)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("{\n\t.reg .pred P1;\n"
                 "WAIT:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@!P1 bra WAIT;\n}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
#endif
}
// Generic-proxy reads of a slot are ordered before the async-proxy writes of its refill.
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Timeline of the decode step (a profiling build: -DQASR_CUDA_TIMELINE). Block 0 of each kernel stamps the moment
// its dependency wait returned; the difference between consecutive kernels is the critical path each one adds,
// and entry → wait shows how early it was launched. Kernels count in launch order from the step's first (embed).
// The buffer is bound per translation unit (timeline_bind in kernels.cuh).
struct Timeline {
    static constexpr int kSlots = 512;
    unsigned long long last;
    int seq, steps;
    unsigned long long crit[kSlots], lead[kSlots], late[kSlots];
    int kind[kSlots];
};
#ifdef QASR_CUDA_TIMELINE
static __device__ Timeline* g_tl = nullptr;
__device__ __forceinline__ unsigned long long gtimer() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void tl_waited(unsigned long long entry, int kind, bool first) {
    if (!g_tl || blockIdx.x != 0 || threadIdx.x != 0) return;
    const unsigned long long t = gtimer();
    Timeline& T = *g_tl;
    const int prev = T.seq;
    const int seq = first ? 0 : min(prev + 1, Timeline::kSlots - 1);
    if (T.last) T.crit[prev] += t - T.last;
    T.lead[seq] += t - entry;
    T.kind[seq] = kind;
    T.seq = seq;
    T.last = t;
    if (first) ++T.steps;
}
__device__ __forceinline__ void tl_ready(unsigned long long waited_at) {
    if (!g_tl || blockIdx.x != 0 || threadIdx.x != 0) return;
    const unsigned long long t = gtimer();
    if (t > waited_at) g_tl->late[g_tl->seq] += t - waited_at;
}
#define QASR_TL_ENTRY const unsigned long long tl_entry_ = ::qasr::cuda::detail::gtimer();
#define QASR_TL_WAITED(kind, first) ::qasr::cuda::detail::tl_waited(tl_entry_, kind, first)
#define QASR_TL_READY() ::qasr::cuda::detail::tl_ready(g_tl ? g_tl->last : 0)
#define QASR_TL_BIND(name)                                                                                            \
    void name(void* p) { QASR_CUDA(cudaMemcpyToSymbol(::qasr::cuda::detail::g_tl, &p, sizeof p)); }
#else
#define QASR_TL_ENTRY
#define QASR_TL_WAITED(kind, first)
#define QASR_TL_READY()
#define QASR_TL_BIND(name)                                                                                            \
    void name(void*) {}
#endif
enum TlKind { kTlEmbed = 0, kTlMatvec, kTlMatvecPf, kTlDecAttn, kTlArgPart, kTlArgFinal };

// four floats → four bf16 (round to nearest even) in one 8-byte store; o 8-byte aligned
__device__ __forceinline__ void store_bf16x4(__nv_bfloat16* o, float a, float b, float c, float d) {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(a, b), hi = __floats2bfloat162_rn(c, d);
    uint2 u;
    u.x = *reinterpret_cast<const uint32_t*>(&lo), u.y = *reinterpret_cast<const uint32_t*>(&hi);
    *reinterpret_cast<uint2*>(o) = u;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Sum over the block (blockDim.x ≤ 1024, a multiple of 32); every thread gets the result.
__device__ inline float block_sum(float v, float* sh) {
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    float t = lane < nw ? sh[lane] : 0.0f;
    t = warp_sum(t);
    return t;
}
// Maximum over the block (as block_sum).
__device__ inline float block_max(float v, float* sh) {
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp, nw = blockDim.x / kWarp;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    return warp_max(lane < nw ? sh[lane] : -FLT_MAX);
}

__device__ __forceinline__ float bf(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// x [KC·256] (16-byte aligned, shared or global memory) into a lane's registers: x[8c … 8c+7] for its chunks
// c = lane + 32j (the layout of the bf16 products and heads: a warp holds all of x).
template <int KC> __device__ __forceinline__ void load_x8(const float* x, int lane, float (&xv)[KC * 8]) {
#pragma unroll
    for (int j = 0; j < KC; ++j) {
        const float4* src = reinterpret_cast<const float4*>(x) + 2 * (lane + j * kWarp);
        const float4 f0 = src[0], f1 = src[1];
        xv[j * 8 + 0] = f0.x, xv[j * 8 + 1] = f0.y, xv[j * 8 + 2] = f0.z, xv[j * 8 + 3] = f0.w;
        xv[j * 8 + 4] = f1.x, xv[j * 8 + 5] = f1.y, xv[j * 8 + 6] = f1.z, xv[j * 8 + 7] = f1.w;
    }
}
__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// Code j of a row's little-endian bit stream. The second byte is read only when the code reaches into it: the last
// code of a matrix can end in its last byte (compute-sanitizer found the unconditional read one byte past the end).
__device__ __forceinline__ uint32_t code_at(const uint8_t* row, int64_t j, int bits) {
    if (bits == 8) return row[j];
    if (bits == 4) return (row[j >> 1] >> ((j & 1) * 4)) & 15u;
    const int64_t bit = j * bits;
    const int sh = int(bit & 7);
    const uint8_t* p = row + (bit >> 3);
    uint32_t v = p[0];
    if (sh + bits > 8) v |= uint32_t(p[1]) << 8;
    return (v >> sh) & ((1u << bits) - 1u);
}

// Code i (0 … 15) of a chunk of 16 MLX codes held in w (8-bit: 16 bytes, 6-bit: 12, 4-bit: 8; little-endian bit
// stream).
template <int BITS> __device__ __forceinline__ uint32_t chunk_code(const uint32_t (&w)[4], int i) {
    if constexpr (BITS == 8) return (w[i >> 2] >> ((i & 3) * 8)) & 255u;
    else if constexpr (BITS == 4) return (w[i >> 3] >> ((i & 7) * 4)) & 15u;
    else {
        const int bit = i * 6, wi = bit >> 5, off = bit & 31;
        uint32_t q = w[wi] >> off;
        if (off > 26) q |= w[wi + 1] << (32 - off);
        return q & 63u;
    }
}

// The 16 codes of the chunk of a quantized row at p as words for chunk_code (8-bit: one 16-byte load, 4-bit: 8
// bytes, 6-bit: three words), and Σ q·x over them with x[0..15].
template <int BITS> __device__ __forceinline__ void chunk_words(const uint8_t* p, uint32_t (&w)[4]) {
    if constexpr (BITS == 8) {
        const uint4 q = *reinterpret_cast<const uint4*>(p);
        w[0] = q.x, w[1] = q.y, w[2] = q.z, w[3] = q.w;
    } else if constexpr (BITS == 4) {
        const uint2 q = *reinterpret_cast<const uint2*>(p);
        w[0] = q.x, w[1] = q.y, w[2] = 0, w[3] = 0;
    } else {
        const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
        w[0] = q[0], w[1] = q[1], w[2] = q[2], w[3] = 0;
    }
}
template <int BITS> __device__ __forceinline__ float chunk_dot(const uint32_t (&w)[4], const float* x) {
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) d += float(chunk_code<BITS>(w, i)) * x[i];
    return d;
}

// A lane's part of an MLX-quantized row's dot product with x: its chunks c = lane + 32j (j < NCH) of the row's codes
// (row), group scales sc and biases bi (group size gs), x's chunk j from xchunk(j, float[16]) and its sum xsum[j]:
// Σ_j scale·Σ q·x + bias·Σ x.
template <int BITS, int NCH, class X>
__device__ __forceinline__ float qrow_dot(const uint8_t* row, const uint16_t* sc, const uint16_t* bi, int gs, int lane,
                                          const float* xsum, X&& xchunk) {
    constexpr int CB = 16 * BITS / 8;
    float acc = 0.0f;
#pragma unroll
    for (int j = 0; j < NCH; ++j) {
        const int c = lane + j * kWarp;
        uint32_t w[4];
        chunk_words<BITS>(row + c * CB, w);
        float f[16];
        xchunk(j, f);
        const float d = chunk_dot<BITS>(w, f);
        const int g = (c * 16) / gs;
        acc += bf(sc[g]) * d + bf(bi[g]) * xsum[j];
    }
    return acc;
}

// Σ of 8 bf16 weights (one 16-byte load) times xp[0..7]; xp is 16-byte aligned shared memory, read with two
// vector loads (eight scalar ones, a lane's 32 bytes at a 32-byte stride, put eight lanes on one bank).
__device__ __forceinline__ float dot8_bf16(const uint4 v, const float* xp) {
    const float4 a = *reinterpret_cast<const float4*>(xp), b = *reinterpret_cast<const float4*>(xp + 4);
    return bf(v.x & 0xffffu) * a.x + bf(v.x >> 16) * a.y + bf(v.y & 0xffffu) * a.z + bf(v.y >> 16) * a.w +
           bf(v.z & 0xffffu) * b.x + bf(v.z >> 16) * b.y + bf(v.w & 0xffffu) * b.z + bf(v.w >> 16) * b.w;
}

// Dot product of a bf16 row [K] (K a multiple of 8, 16-byte aligned) with x in shared memory; one warp, sum in every lane.
__device__ __forceinline__ float dot_bf16_row(const uint16_t* row, const float* xs, int K, int lane) {
    float acc = 0.0f;
    const uint4* r = reinterpret_cast<const uint4*>(row);
    const int n8 = K / 8;
    constexpr int B = 8; // loads in flight per lane
    for (int c0 = lane; c0 < n8; c0 += B * kWarp) {
        uint4 v[B];
#pragma unroll
        for (int b = 0; b < B; ++b)
            if (c0 + b * kWarp < n8) v[b] = __ldg(r + c0 + b * kWarp);
#pragma unroll
        for (int b = 0; b < B; ++b) {
            const int c = c0 + b * kWarp;
            if (c >= n8) break;
            acc += dot8_bf16(v[b], xs + c * 8);
        }
    }
    return warp_sum(acc);
}

inline unsigned grid_for(int64_t n, int threads = 256) {
    const int64_t b = (n + threads - 1) / threads;
    return unsigned(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

template <class... P, class... A>
void launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, A&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl_enabled() ? 1 : 0;
    QASR_CUDA(cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...));
}

} // namespace detail
} // namespace qasr::cuda
