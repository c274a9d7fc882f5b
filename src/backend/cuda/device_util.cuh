// Device helpers shared by the CUDA kernel files: warp/block reductions, bf16 widening, activations, MLX code
// extraction, programmatic-dependent-launch controls, and the launch helper.
#pragma once
#include "backend/cuda/check.hpp"

#include <cuda_runtime.h>

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

__device__ __forceinline__ float bf(uint32_t bits16) { return __uint_as_float(bits16 << 16); }
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
