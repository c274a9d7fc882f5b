// Beam search's choice on the device: for each of B rows of logits, the k largest (value descending, ties to the
// lower index) and their log-softmax, so that a step brings back B·k pairs instead of B·V logits.
//
// Pass 1 (B × kTopkSlices blocks): a block's slice of its row — the slice's maximum and Σ exp(x − max), and its k
// best, found in k rounds: each round every thread takes its best element that comes after the previous winner in
// the (value desc, index asc) order, and the block keeps the best of those (no element is marked: the order itself
// excludes the ones taken). Pass 2 (B blocks): the same rounds over the slices' candidates, and the row's
// log-sum-exp from the slices' maxima and sums.
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/check.hpp"
#include "core/error.hpp"

#include <cfloat>
#include <climits>

namespace qasr::cuda {

namespace {

constexpr int kThreads = 256;

struct Pick {
    float v;
    int i;
};

// a comes first in the order: larger value, or the same value at a lower index
__device__ __forceinline__ bool before(const Pick& a, const Pick& b) { return a.v > b.v || (a.v == b.v && a.i < b.i); }

__device__ __forceinline__ Pick warp_best(Pick p) {
    for (int o = 16; o > 0; o >>= 1) {
        Pick q{__shfl_down_sync(0xffffffffu, p.v, o), __shfl_down_sync(0xffffffffu, p.i, o)};
        if (before(q, p)) p = q;
    }
    return p;
}

// The block's best pick (thread 0's result is broadcast through shared memory).
__device__ Pick block_best(Pick p, Pick* sh) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    p = warp_best(p);
    if (lane == 0) sh[w] = p;
    __syncthreads();
    if (w == 0) {
        p = lane < kThreads / 32 ? sh[lane] : Pick{-FLT_MAX, INT_MAX};
        p = warp_best(p);
        if (lane == 0) sh[0] = p;
    }
    __syncthreads();
    const Pick r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < kThreads / 32 ? sh[threadIdx.x] : 0.0f;
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (threadIdx.x == 0) sh[0] = v;
    }
    __syncthreads();
    const float r = sh[0];
    __syncthreads();
    return r;
}

// k rounds over the values val[lo … hi) strided across the block, each known by idx[j] (or by j itself where idx is
// null; INT_MAX marks a padding entry): out gets the k best in order (thread 0 writes).
__device__ void rounds(const float* val, const int* idx, int lo, int hi, int k, float* out_v, int* out_i, Pick* sh) {
    Pick last{INFINITY, -1}; // everything comes after it
    for (int r = 0; r < k; ++r) {
        Pick best{-FLT_MAX, INT_MAX};
        for (int j = lo + threadIdx.x; j < hi; j += kThreads) {
            const Pick c{val[j], idx ? idx[j] : j};
            if (c.i != INT_MAX && before(last, c) && before(c, best)) best = c;
        }
        best = block_best(best, sh);
        if (threadIdx.x == 0) out_v[r] = best.v, out_i[r] = best.i;
        last = best;
    }
}

__global__ void k_topk_slices(const float* lg, int V, int k, int slices, float* pv, int* pi, float* pmax, float* psum) {
    __shared__ Pick sh[kThreads / 32];
    __shared__ float shf[kThreads / 32];
    const int b = blockIdx.y, s = blockIdx.x;
    const int lo = int(int64_t(V) * s / slices), hi = int(int64_t(V) * (s + 1) / slices);
    const float* x = lg + size_t(b) * size_t(V);
    Pick m{-FLT_MAX, INT_MAX};
    for (int j = lo + threadIdx.x; j < hi; j += kThreads)
        if (before(Pick{x[j], j}, m)) m = Pick{x[j], j};
    m = block_best(m, sh);
    float e = 0;
    for (int j = lo + threadIdx.x; j < hi; j += kThreads) e += __expf(x[j] - m.v);
    e = block_sum(e, shf);
    const size_t o = (size_t(b) * slices + s) * size_t(k);
    if (threadIdx.x == 0) pmax[size_t(b) * slices + s] = m.v, psum[size_t(b) * slices + s] = e;
    rounds(x, nullptr, lo, hi, k, pv + o, pi + o, sh);
}

__global__ void k_topk_merge(int k, int slices, const float* pv, const int* pi, const float* pmax, const float* psum,
                             int* ids, float* logprobs) {
    __shared__ Pick sh[kThreads / 32];
    __shared__ float shf[kThreads / 32];
    __shared__ float best_v[64];
    __shared__ int best_i[64];
    const int b = blockIdx.x;
    const size_t o = size_t(b) * slices * size_t(k);
    rounds(pv + o, pi + o, 0, slices * k, k, best_v, best_i, sh);
    // log Σ exp over the row from the slices: M + log Σ_s sum_s · exp(max_s − M)
    float M = -FLT_MAX;
    for (int s = 0; s < slices; ++s) M = fmaxf(M, pmax[size_t(b) * slices + s]);
    float t = 0;
    for (int s = threadIdx.x; s < slices; s += kThreads) t += psum[size_t(b) * slices + s] * __expf(pmax[size_t(b) * slices + s] - M);
    t = block_sum(t, shf);
    const float lse = M + logf(t);
    __syncthreads();
    for (int r = threadIdx.x; r < k; r += kThreads) {
        ids[size_t(b) * k + r] = best_i[r];
        logprobs[size_t(b) * k + r] = best_v[r] - lse;
    }
}

} // namespace

size_t row_topk_scratch_floats(int B, int k) { return size_t(B) * kTopkSlices * (2 * size_t(k) + 2); }

void row_topk(const float* logits, int B, int V, int k, float* scratch, int* ids, float* logprobs, cudaStream_t s) {
    if (k < 1 || k > 64 || k > V) fail("cuda", "row_topk: k must be in [1, min(64, V)]");
    const int slices = kTopkSlices;
    float* pv = scratch;
    int* pi = reinterpret_cast<int*>(pv + size_t(B) * slices * k);
    float* pmax = reinterpret_cast<float*>(pi + size_t(B) * slices * k);
    float* psum = pmax + size_t(B) * slices;
    k_topk_slices<<<dim3(slices, B), kThreads, 0, s>>>(logits, V, k, slices, pv, pi, pmax, psum);
    QASR_CUDA(cudaGetLastError());
    k_topk_merge<<<B, kThreads, 0, s>>>(k, slices, pv, pi, pmax, psum, ids, logprobs);
    QASR_CUDA(cudaGetLastError());
}

} // namespace qasr::cuda
