// Floors of the CUDA decode step's structure on the GPU at hand (docs/benchmarks.md, CUDA → Session 7):
//  1. a chain of dependent kernels in a CUDA graph: the cost of one kernel boundary, with and without programmatic
//     dependent launch (PDL), empty or with one L2 read + warp reduction;
//  2. a persistent kernel with grid-wide barriers (cooperative grid.sync) instead of kernel boundaries;
//  3. a decode-like chain (28 layers × 4 "matrix" kernels of 128 blocks reading 64/32/96/48 KB slices, the 0.6B
//     layer's q/k/v, o, gate/up and down, optionally a spinning "attention" kernel) with the weights read after the
//     dependency wait, or bulk-copied into shared memory before it — and, with the prefetch, x read by every warp
//     from L2 (the hot spot) or once per block.
// Build: part of the CUDA build (bench/CMakeLists.txt); run: build/bench/cuda_step_floors
#include "cuda_bench_check.cuh"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

namespace cg = cooperative_groups;

__device__ __forceinline__ void dep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void dep_launch() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ uint32_t sa(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned long long gtime() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ float wsum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// 1. one link of a chain: empty, or one L2 read + warp reduction + a store
__global__ void k_link(float* buf, int work, int early) {
    dep_wait();
    if (early) dep_launch();
    if (work) {
        const float v = wsum(__ldcg(buf + (threadIdx.x % 1024)));
        if (threadIdx.x == 0) buf[1024 + blockIdx.x] = v;
    }
    if (!early) dep_launch();
}

// 2. the same work per phase, phases separated by grid.sync
__global__ void k_persistent(float* buf, int phases) {
    cg::grid_group grid = cg::this_grid();
    for (int i = 0; i < phases; ++i) {
        const float v = wsum(__ldcg(buf + (threadIdx.x + i) % 1024));
        if (threadIdx.x == 0) buf[1024 + blockIdx.x] = v;
        grid.sync();
    }
}

// 3. a "matrix" kernel: the block's slice of weights (slice16 × 16 bytes) and x [1024].
// prefetch 0: weights read after the wait; 1: bulk copy into shared memory before it.
// xmode 0: every warp reads all of x from L2; 1: x read once per block into shared memory.
__global__ void __launch_bounds__(256, 2) k_matrix(const uint4* w, int slice16, int prefetch, int xmode, float* x) {
    extern __shared__ __align__(128) uint4 wsm[];
    __shared__ __align__(8) uint64_t bar;
    __shared__ __align__(16) float xs[1024];
    const uint4* src = w + size_t(blockIdx.x) * slice16;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (prefetch) {
        if (threadIdx.x == 0) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sa(&bar)));
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(&bar)), "r"(slice16 * 16)
                         : "memory");
            asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                             sa(wsm)),
                         "l"(src), "r"(slice16 * 16), "r"(sa(&bar))
                         : "memory");
        }
        __syncthreads();
    }
    dep_wait();
    dep_launch();
    const float* xsrc = x;
    if (xmode == 1) {
        reinterpret_cast<float4*>(xs)[threadIdx.x] = __ldcg(reinterpret_cast<const float4*>(x) + threadIdx.x);
        __syncthreads();
        xsrc = xs;
    }
    float xr[32]; // lane's x[8c .. 8c+7] for c = lane + 32j
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4* p = reinterpret_cast<const float4*>(xsrc) + 2 * (lane + 32 * j);
        const float4 a = xmode == 1 ? p[0] : __ldcg(p), b = xmode == 1 ? p[1] : __ldcg(p + 1);
        xr[j * 8] = a.x, xr[j * 8 + 1] = a.y, xr[j * 8 + 2] = a.z, xr[j * 8 + 3] = a.w;
        xr[j * 8 + 4] = b.x, xr[j * 8 + 5] = b.y, xr[j * 8 + 6] = b.z, xr[j * 8 + 7] = b.w;
    }
    if (prefetch)
        asm volatile("{\n\t.reg .pred P1;\nWAIT:\n\tmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t@!P1 bra WAIT;\n}" ::"r"(
                         sa(&bar)),
                     "r"(0)
                     : "memory");
    const int rows = slice16 / 128; // rows of 1024 bf16
    for (int r = warp; r < rows; r += 8) {
        const uint4* row = prefetch ? wsm + r * 128 : src + r * 128;
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const uint4 v = prefetch ? row[lane + 32 * j] : __ldcg(row + lane + 32 * j);
            const float* xx = xr + 8 * j;
            acc += __uint_as_float(v.x << 16) * xx[0] + __uint_as_float(v.x & 0xffff0000u) * xx[1] +
                   __uint_as_float(v.y << 16) * xx[2] + __uint_as_float(v.y & 0xffff0000u) * xx[3] +
                   __uint_as_float(v.z << 16) * xx[4] + __uint_as_float(v.z & 0xffff0000u) * xx[5] +
                   __uint_as_float(v.w << 16) * xx[6] + __uint_as_float(v.w & 0xffff0000u) * xx[7];
        }
        acc = wsum(acc);
        if (lane == 0) x[4096 + blockIdx.x * 64 + r] = acc;
    }
}

__global__ void k_spin(float* x, int ns) {
    dep_wait();
    dep_launch();
    const unsigned long long t0 = gtime();
    while (gtime() - t0 < static_cast<unsigned long long>(ns)) {
    }
    if (threadIdx.x == 0) x[blockIdx.x] = 1.0f;
}

template <class... P, class... A>
void launch(void (*k)(P...), int grid, int block, size_t smem, bool pdl, cudaStream_t s, A... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(grid));
    cfg.blockDim = dim3(unsigned(block));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, k, args...));
}

// Median-free average over `reps` replays of a captured graph, in µs per replay.
template <class F> double time_graph(cudaStream_t s, int reps, F&& enqueue) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    enqueue();
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s));
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a, s));
    for (int i = 0; i < reps; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaStreamSynchronize(s));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return 1000.0 * ms / reps;
}

} // namespace

int main() {
    int dev = 0, sms = 0, major = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major < 9) {
        std::printf("needs sm_90 or newer (programmatic dependent launch, bulk copies)\n");
        return 0;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, dev));
    std::printf("%s, %d SMs\n", prop.name, sms);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    float* buf;
    CK(cudaMalloc(&buf, 1 << 20));
    CK(cudaMemset(buf, 0, 1 << 20));

    const int n = 145; // kernels of one 0.6B decode step
    std::printf("\n1. one kernel boundary in a graph of %d dependent kernels, µs:\n", n);
    for (int work : {0, 1})
        for (int blocks : {1, sms, 4 * sms})
            for (int mode : {0, 1, 2}) { // no PDL; PDL, trigger at the end; PDL, trigger after the wait
                const double us = time_graph(s, 50, [&] {
                    for (int i = 0; i < n; ++i) launch(k_link, blocks, 256, 0, mode > 0, s, buf, work, int(mode == 2));
                });
                std::printf("  %-12s %4d blocks  %-26s %.2f\n", work ? "L2 read" : "empty", blocks,
                            mode == 0 ? "no PDL" : mode == 1 ? "PDL, trigger at the end" : "PDL, trigger after wait",
                            us / n);
            }

    {
        int phases = n;
        void* args[] = {&buf, &phases};
        for (int i = 0; i < 3; ++i) CK(cudaLaunchCooperativeKernel((void*)k_persistent, sms, 256, args, 0, s));
        cudaEvent_t a, b;
        CK(cudaEventCreate(&a));
        CK(cudaEventCreate(&b));
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < 20; ++i) CK(cudaLaunchCooperativeKernel((void*)k_persistent, sms, 256, args, 0, s));
        CK(cudaEventRecord(b, s));
        CK(cudaStreamSynchronize(s));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        std::printf("\n2. persistent kernel, %d blocks, L2 read + grid.sync per phase: %.2f µs per phase\n", sms,
                    1000.0 * ms / 20 / n);
    }

    const int L = 28, kb[4] = {64, 32, 96, 48}; // KB per block of q/k/v, o, gate/up, down (0.6B, 128 blocks)
    size_t per_layer = 0;
    for (int k : kb) per_layer += size_t(k) * 1024 * 128;
    uint4* w;
    CK(cudaMalloc(&w, per_layer * L));
    CK(cudaMemset(w, 1, per_layer * L));
    CK(cudaFuncSetAttribute(k_matrix, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    std::printf("\n3. decode-like chain, %d layers x 4 matrix kernels (%.1f MB per layer), per layer µs and weight "
                "bandwidth:\n", L, per_layer / 1e6);
    for (int spin : {0, 8000})
        for (int variant = 0; variant < 3; ++variant) { // no prefetch; prefetch + x per warp; prefetch + x per block
            const int prefetch = variant > 0, xmode = variant == 2 ? 1 : 0;
            const double us = time_graph(s, 20, [&] {
                const char* base = reinterpret_cast<const char*>(w);
                for (int l = 0; l < L; ++l)
                    for (int m = 0; m < 4; ++m) {
                        launch(k_matrix, 128, 256, prefetch ? size_t(kb[m]) * 1024 : 0, true, s,
                               reinterpret_cast<const uint4*>(base), kb[m] * 1024 / 16, prefetch, xmode, buf);
                        base += size_t(kb[m]) * 1024 * 128;
                        if (m == 0 && spin) launch(k_spin, 128, 128, 0, true, s, buf, spin);
                    }
            });
            std::printf("  attention stand-in %4.1f µs, %-44s %6.2f µs per layer, %.2f TB/s\n", spin / 1000.0,
                        variant == 0   ? "weights read after the wait"
                        : variant == 1 ? "weights prefetched, every warp reads x (L2)"
                                       : "weights prefetched, x once per block",
                        us / L, per_layer * L / us / 1e6);
        }
    CK(cudaFree(w));
    CK(cudaFree(buf));
    return 0;
}
