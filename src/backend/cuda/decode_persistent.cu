// One decode step as ONE persistent cooperative kernel (bf16 decoder weights): every block stays resident for
// the whole step and the phases are separated by grid-wide barriers instead of kernel boundaries, so the ~145
// launch-to-launch latency chains of the per-layer kernels become ~145 barriers. Before each barrier a warp
// pulls the weight rows it will read in the next phase towards L2 (weights never depend on the activations).
// Phases: embed; per layer: RMSNorm + q/k/v rows | decode attention (decode_attention.cuh) | o rows + residual |
// RMSNorm + gate/up rows + SwiGLU | down rows + residual; then final norm + LM head rows | per-block argmax
// slices | block 0 merges (token, log-probability, ring, position).
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/decode_persistent.cuh"
#include "backend/cuda/device_util.cuh"

#include "core/error.hpp"

#include <cooperative_groups.h>

#include <cfloat>
#include <cmath>

namespace qasr::cuda {

namespace {

using namespace detail;
namespace cg = cooperative_groups;

constexpr int kThreads = kDecThreads; // 128: the decode-attention body needs exactly this block size
constexpr int kWarps = kThreads / kWarp;

// x → xs (shared) for this block, RMS-normalised with weight nw when nw is non-null.
__device__ void stage(const float* x, int K, const float* nw, float eps, float* xs, float* red) {
    float ss = 0.0f;
    if (nw) {
        for (int k = threadIdx.x; k < K; k += kThreads) ss += x[k] * x[k];
        ss = block_sum(ss, red);
    }
    const float inv = nw ? rsqrtf(ss / float(K) + eps) : 1.0f;
    for (int k = threadIdx.x; k < K; k += kThreads) xs[k] = nw ? __ldcg(x + k) * inv * nw[k] : __ldcg(x + k);
    __syncthreads();
}

// Rows of a [N, K] bf16 matrix handled by this warp in a phase: r = gw, gw + total warps, ...
__device__ __forceinline__ int64_t warp_id() { return int64_t(blockIdx.x) * kWarps + threadIdx.x / kWarp; }
__device__ __forceinline__ int64_t warps_total() { return int64_t(gridDim.x) * kWarps; }

// Pull this warp's rows of the next phase's matrix towards L2 (at most `max_rows` rows: the first wave).
__device__ void prefetch_rows(const uint16_t* W, int64_t N, int K, int64_t row_off, int max_rows) {
    const int lane = threadIdx.x % kWarp;
    const int64_t row_b = int64_t(K) * 2;
    int n = 0;
    for (int64_t r = warp_id(); r < N && n < max_rows; r += warps_total(), ++n) {
        const char* base = reinterpret_cast<const char*>(W + r * K);
        for (int64_t off = int64_t(lane) * 128; off < row_b; off += kWarp * 128) prefetch_l2(base + off);
        if (row_off) {
            const char* b2 = reinterpret_cast<const char*>(W + (r + row_off) * K);
            for (int64_t off = int64_t(lane) * 128; off < row_b; off += kWarp * 128) prefetch_l2(b2 + off);
        }
    }
}

enum class Out { Store, Add, SwiGLU };

// y = W · xs for this warp's rows (SwiGLU: y[r] = silu(W[r]·xs) · W[r + N]·xs).
template <Out O>
__device__ void rows(const uint16_t* W, int64_t N, int K, const float* xs, float* y) {
    const int lane = threadIdx.x % kWarp;
    for (int64_t r = warp_id(); r < N; r += warps_total()) {
        const float v = dot_bf16_row(W + r * K, xs, K, lane);
        if constexpr (O == Out::SwiGLU) {
            const float u = dot_bf16_row(W + (r + N) * K, xs, K, lane);
            if (lane == 0) y[r] = silu(v) * u;
        } else if (lane == 0) {
            if constexpr (O == Out::Add) y[r] += v;
            else y[r] = v;
        }
    }
}

template <int HD>
__global__ void __launch_bounds__(kThreads) k_decode_step(PersistArgs a) {
    extern __shared__ float xs[];
    __shared__ float red[32];
    cg::grid_group grid = cg::this_grid();
    const int D = a.D, qkvN = (a.Hq + 2 * a.Hkv) * HD, oK = a.Hq * HD;
    const int lane = threadIdx.x % kWarp;
    // embed: x = table[token]
    const int tok = *a.tok;
    for (int64_t d = int64_t(blockIdx.x) * kThreads + threadIdx.x; d < D; d += int64_t(gridDim.x) * kThreads)
        a.x[d] = bf(a.embed[int64_t(tok) * D + d]);
    prefetch_rows(a.layers[0].qkv, qkvN, D, 0, 2);
    grid.sync();
    for (int li = 0; li < a.L; ++li) {
        const PersistLayer& l = a.layers[li];
        stage(a.x, D, l.in_norm, a.eps, xs, red);
        rows<Out::Store>(l.qkv, qkvN, D, xs, a.qkv);
        prefetch_rows(l.o, D, oK, 0, 2);
        grid.sync();
        DecAttnArgs at;
        at.qkv = a.qkv, at.pos = a.pos, at.Hq = a.Hq, at.Hkv = a.Hkv, at.hd = HD;
        at.qn = l.q_norm, at.kn = l.k_norm, at.eps = a.eps, at.inv_freq = a.inv_freq;
        at.kc = l.kc, at.vc = l.vc, at.o = a.attn;
        at.splits = a.splits, at.part = a.part, at.counter = a.counter;
        for (int b = blockIdx.x; b < a.Hkv * a.splits; b += gridDim.x) {
            decode_attention_block<HD>(at, b);
            __syncthreads();
        }
        grid.sync();
        stage(a.attn, oK, nullptr, a.eps, xs, red);
        rows<Out::Add>(l.o, D, oK, xs, a.x);
        prefetch_rows(l.gateup, a.I, D, a.I, 1);
        grid.sync();
        stage(a.x, D, l.post_norm, a.eps, xs, red);
        rows<Out::SwiGLU>(l.gateup, a.I, D, xs, a.h);
        prefetch_rows(l.down, D, a.I, 0, 2);
        grid.sync();
        stage(a.h, a.I, nullptr, a.eps, xs, red);
        rows<Out::Add>(l.down, D, a.I, xs, a.x);
        if (li + 1 < a.L) prefetch_rows(a.layers[li + 1].qkv, qkvN, D, 0, 2);
        else prefetch_rows(a.head, a.V, D, 0, 2);
        grid.sync();
    }
    stage(a.x, D, a.norm, a.eps, xs, red);
    rows<Out::Store>(a.head, a.V, D, xs, a.logits);
    grid.sync();
    { // this block's slice of the logits: (max, lowest index of the max, Σ exp(x − max))
        const int64_t per = (a.V + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * per, hi = min(a.V, lo + per);
        float bv = -FLT_MAX;
        int bi = 0x7fffffff;
        for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) {
            const float v = __ldcg(a.logits + i);
            if (v > bv) bv = v, bi = int(i);
        }
        __shared__ float sv[kWarps];
        __shared__ int si[kWarps];
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
        if (lane == 0) sv[threadIdx.x / kWarp] = bv, si[threadIdx.x / kWarp] = bi;
        __syncthreads();
        float mx = sv[0];
        int mi = si[0];
        for (int w = 1; w < kWarps; ++w)
            if (sv[w] > mx || (sv[w] == mx && si[w] < mi)) mx = sv[w], mi = si[w];
        float sum = 0.0f;
        for (int64_t i = lo + threadIdx.x; i < hi; i += kThreads) sum += expf(__ldcg(a.logits + i) - mx);
        sum = block_sum(sum, red);
        if (threadIdx.x == 0) {
            a.argpart[3 * blockIdx.x] = mx;
            a.argpart[3 * blockIdx.x + 1] = __int_as_float(mi);
            a.argpart[3 * blockIdx.x + 2] = hi > lo ? sum : 0.0f;
        }
    }
    grid.sync();
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    float M = -FLT_MAX;
    int id = 0x7fffffff;
    for (unsigned p = 0; p < gridDim.x; ++p) {
        const float m = __ldcg(a.argpart + 3 * p);
        const int i = __float_as_int(__ldcg(a.argpart + 3 * p + 1));
        if (m > M || (m == M && i < id)) M = m, id = i;
    }
    float S = 0.0f;
    for (unsigned p = 0; p < gridDim.x; ++p) {
        const float s = __ldcg(a.argpart + 3 * p + 2);
        if (s > 0.0f) S += s * expf(__ldcg(a.argpart + 3 * p) - M);
    }
    const float lp = (__ldcg(a.logits + id) - M) - logf(S);
    *a.tok = id;
    const int c = *a.count;
    a.ring[c % a.ring_size] = make_int2(id, __float_as_int(lp));
    *a.count = c + 1;
    *a.pos += 1;
}

template <int HD> void* step_kernel() { return reinterpret_cast<void*>(&k_decode_step<HD>); }

void* kernel_for(int hd) {
    if (hd == 128) return step_kernel<128>();
    if (hd == 64) return step_kernel<64>();
    if (hd == 256) return step_kernel<256>();
    return nullptr;
}

} // namespace

bool persistent_step_supported(int Hq, int Hkv, int hd) { return decode_attention_supported(Hq, Hkv, hd); }

size_t persistent_step_smem(int D, int Hq, int hd, int I) {
    return size_t(std::max(std::max(D, Hq * hd), I)) * sizeof(float);
}

int persistent_step_grid(int device, int hd, size_t smem) {
    void* k = kernel_for(hd);
    if (!k) fail("cuda", "persistent decode step: unsupported head_dim " + std::to_string(hd));
    int sms = 0, per_sm = 0;
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    if (smem > 48 * 1024) QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    QASR_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, kThreads, smem));
    if (per_sm < 1) fail("cuda", "persistent decode step: the kernel does not fit on an SM");
    return sms * per_sm;
}

void persistent_step(const PersistArgs& a, int grid, size_t smem, cudaStream_t s) {
    void* k = kernel_for(a.hd);
    if (!k) fail("cuda", "persistent decode step: unsupported head_dim " + std::to_string(a.hd));
    PersistArgs args = a;
    void* params[] = {&args};
    QASR_CUDA(cudaLaunchCooperativeKernel(k, dim3(unsigned(grid)), dim3(kThreads), params, smem, s));
}

} // namespace qasr::cuda
