// CUDA attention kernels: the many-row attention of the encoder and the prefill (row per warp, or tiled through
// shared memory) and the fused decode attention (decode_attention.cuh's block body) with its launchers — one block
// per (kv head, key split), the splits merged in a thread-block cluster on sm_90. Contracts in kernels.cuh.
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include "core/error.hpp"

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace qasr::cuda {
namespace {

using namespace detail;

// Attention: one warp per (row, head, split). Pass 1: running max and sum of exp over the split's keys (lane-
// strided); pass 2: scores again, weights broadcast by shuffles, lane owns output dims lane, lane+32, ….
constexpr int kMaxHd = 256;
__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }
// HD > 0: head dimension known at compile time (a multiple of 32): each lane's key row is loaded with all its
// float4s in flight and the loops are unrolled. HD = 0: any multiple of 4 up to kMaxHd.
template <int HD, bool ROWS = false>
__global__ void __launch_bounds__(128) k_attention(AttnArgs a, RowsKv rk) {
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
    const float* kbase = a.k;
    const float* vbase = a.v;
    if constexpr (ROWS) { // a batched step's row: its own session's cache, up to its position
        lo = 0;
        hi = rk.rows->pos[r] + 1;
        const int64_t plane = rk.rows->cap[r] * a.kv_stride;
        kbase = rk.rows->kv[r] + 2 * rk.layer * plane;
        vbase = kbase + plane;
    } else if (a.causal) {
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
    const float* kb = kbase + int64_t(kvh) * hd;
    const float* vb = vbase + int64_t(kvh) * hd;
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

// Attention of many query rows (prefill, encoder), tiled: block (tile of kAtQ query rows, head, key split), kAtQ / 4
// rows per warp. Each tile of 32 keys and values is loaded once into shared memory (coalesced) for all the block's
// rows; lane j scores key j of the tile (keys padded to HD + 1 floats: conflict-free), an online softmax per row,
// then each lane accumulates output dims lane, lane + 32, … from the values in shared memory. About ten times faster
// than k_attention for a 158-row prefill (which walks every key per row from L2 at one row per warp).
// S > 1: the S blocks of a row tile form a thread-block cluster (sm_90) and take its key tiles in turn (tile i to
// rank i mod S); their partial (max, sum, output) per row meet in distributed shared memory, each rank merging
// kAtQ / S rows. The block's chain of dependent key tiles is what this kernel's time was (a 158-row prefill: 5
// tiles in the last row tile, ~35 µs per layer on the H200).
constexpr int kAtQ = 16, kAtK = 32, kAtMaxSplit = 8;
template <int HD, int S>
__global__ void __launch_bounds__(128) k_attention_tiled(AttnArgs a) {
    constexpr int RW = kAtQ / 4, ND = HD / kWarp;
    __shared__ __align__(16) float Qs[kAtQ][HD]; // the block's query rows; after the key tiles its partial outputs
    __shared__ float Ks[kAtK][HD + 1];
    __shared__ __align__(16) float Vs[kAtK][HD];
    __shared__ float Ms[kAtQ], Ls[kAtQ];
    dep_wait();
    dep_launch();
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
    const int rank = S > 1 ? int(blockIdx.x % S) : 0;
    const int r0 = int(blockIdx.x / S) * kAtQ, h = blockIdx.y, kvh = h / (a.heads / a.kv_heads);
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
        if (r0 + r < a.n) {
            v = *reinterpret_cast<const float4*>(a.q + int64_t(r0 + r) * a.q_stride + int64_t(h) * HD + c);
            if (a.bq) v = add4(v, *reinterpret_cast<const float4*>(a.bq + h * HD + c));
        }
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
    for (int t0 = klo + rank * kAtK; t0 < khi; t0 += S * kAtK) {
        __syncthreads(); // the previous tile's readers are done (and Qs is written, first time)
        for (int i = threadIdx.x; i < kAtK * HD / 4; i += blockDim.x) {
            const int j = i / (HD / 4), c = (i % (HD / 4)) * 4;
            float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
            if (t0 + j < khi) {
                kv = *reinterpret_cast<const float4*>(kb + int64_t(t0 + j) * a.kv_stride + c);
                vv = *reinterpret_cast<const float4*>(vb + int64_t(t0 + j) * a.kv_stride + c);
                if (a.bk) {
                    kv = add4(kv, *reinterpret_cast<const float4*>(a.bk + kvh * HD + c));
                    vv = add4(vv, *reinterpret_cast<const float4*>(a.bv + kvh * HD + c));
                }
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
    auto store = [&](int r, int d, float v) { // output element (bf16 for the next product when a.ob is set)
        if (a.ob) a.ob[int64_t(r) * a.o_stride + int64_t(h) * HD + d] = __float2bfloat16(v);
        else a.o[int64_t(r) * a.o_stride + int64_t(h) * HD + d] = v;
    };
    if constexpr (S == 1) {
#pragma unroll
        for (int i = 0; i < RW; ++i) {
            const int r = r0 + w * RW + i;
            if (r >= a.n) break;
            const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
#pragma unroll
            for (int u = 0; u < ND; ++u) store(r, lane + u * kWarp, acc[i][u] * inv);
        }
    } else {
        __syncthreads(); // every warp is done with Qs: it takes the partial outputs
#pragma unroll
        for (int i = 0; i < RW; ++i) {
#pragma unroll
            for (int u = 0; u < ND; ++u) Qs[w * RW + i][lane + u * kWarp] = acc[i][u];
            if (lane == 0) Ms[w * RW + i] = m[i], Ls[w * RW + i] = l[i];
        }
        cluster_sync_all(); // every rank's partials visible to the cluster
        constexpr int RR = kAtQ / S; // rows this rank merges
        for (int e = threadIdx.x; e < RR * HD; e += blockDim.x) {
            const int rr = rank * RR + e / HD, d = e % HD, r = r0 + rr;
            if (r >= a.n) break;
            float M = -INFINITY;
#pragma unroll
            for (int s2 = 0; s2 < S; ++s2) M = fmaxf(M, *cluster_peer(&Ms[rr], s2));
            float L = 0.0f, o = 0.0f;
#pragma unroll
            for (int s2 = 0; s2 < S; ++s2) {
                const float ms = *cluster_peer(&Ms[rr], s2);
                if (ms == -INFINITY) continue; // no key of this row in that rank's tiles
                const float e2 = expf(ms - M);
                L += *cluster_peer(&Ls[rr], s2) * e2;
                o += *cluster_peer(&Qs[rr][d], s2) * e2;
            }
            store(r, d, L > 0.0f ? o / L : 0.0f);
        }
        cluster_sync_all(); // no block leaves while its peers may still read its shared memory
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
    if (a.early) dep_launch();
    if constexpr (!PRE) {
        dep_wait();
        if (!a.early) dep_launch();
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

template <class K, class Args>
void launch_cluster(K k, const Args& a, int cluster, dim3 grid, size_t smem, cudaStream_t s) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(kDecThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
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
    launch_cluster(k_decode_attention<HD, GC, PRE, true>, a, a.splits, grid, 0, s);
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

} // namespace

void attention(const AttnArgs& a, cudaStream_t s, RowsKv rk) {
    if (a.hd > kMaxHd || a.hd % 4 != 0) fail("cuda", "attention: head_dim must be a multiple of 4, at most 256");
    if (a.heads % a.kv_heads != 0) fail("cuda", "attention: heads not a multiple of kv heads");
    if (rk.rows && (a.n > BatchRows::kMax || a.bq || !a.causal))
        fail("cuda", "attention: a batched step's rows are causal, without biases, at most BatchRows::kMax");
    const int64_t warps = int64_t(a.n) * a.heads * a.splits;
    if (!warps) return;
    // many rows in one split: the tiled kernel (QASR_CUDA_ATTN_TILED=0 keeps the row-per-warp one, for A/B)
    if ((a.bq || a.bk || a.bv) && !(a.bq && a.bk && a.bv && attention_tiled(a)))
        fail("cuda", "attention: q/k/v biases need all three and the tiled kernel (attention_tiled)");
    if (!rk.rows && attention_mma(a, s)) return; // tensor cores (attention_mma.cu) where the device has them
    if (!rk.rows && attention_tiled(a)) {
        // key splits: about two key tiles per block in the longest row tile (a power of two ≤ kAtMaxSplit;
        // QASR_CUDA_ATTN_SPLIT=n caps it, 1 for none)
        static const int max_split = [] {
            const char* e = std::getenv("QASR_CUDA_ATTN_SPLIT");
            return e ? std::max(1, std::min(kAtMaxSplit, std::atoi(e))) : kAtMaxSplit;
        }();
        const int keys = a.keys_hint > 0 ? a.keys_hint : a.causal ? a.n : std::min(a.n, a.window + kAtQ);
        int S = 1;
        while (S < max_split && S * 2 * kAtK < keys) S *= 2;
        const dim3 tg(unsigned((a.n + kAtQ - 1) / kAtQ * S), unsigned(a.heads));
        auto go = [&](auto k1, auto kS) {
            if (S > 1 && cluster_ok_cached(kS, S, 0)) launch_cluster(kS, a, S, tg, 0, s);
            else launch(k1, dim3(unsigned((a.n + kAtQ - 1) / kAtQ), unsigned(a.heads)), dim3(128), 0, s, a);
        };
        if (a.hd == 128) {
            if (S == 2) go(k_attention_tiled<128, 1>, k_attention_tiled<128, 2>);
            else if (S == 4) go(k_attention_tiled<128, 1>, k_attention_tiled<128, 4>);
            else if (S == 8) go(k_attention_tiled<128, 1>, k_attention_tiled<128, 8>);
            else go(k_attention_tiled<128, 1>, k_attention_tiled<128, 1>);
        } else {
            if (S == 2) go(k_attention_tiled<64, 1>, k_attention_tiled<64, 2>);
            else if (S == 4) go(k_attention_tiled<64, 1>, k_attention_tiled<64, 4>);
            else if (S == 8) go(k_attention_tiled<64, 1>, k_attention_tiled<64, 8>);
            else go(k_attention_tiled<64, 1>, k_attention_tiled<64, 1>);
        }
        return;
    }
    if (a.ob) { // the other kernels write float32 into o, then one conversion
        if (!a.o) fail("cuda", "attention: a bf16 output outside the tiled kernel needs the float32 buffer o");
        AttnArgs f = a;
        f.ob = nullptr;
        attention(f, s, rk);
        to_bf16(a.o, size_t(a.n) * a.o_stride, a.ob, s);
        return;
    }
    const dim3 grid(unsigned((warps + 3) / 4));
    if (rk.rows) {
        if (a.hd == 128) launch(k_attention<128, true>, grid, dim3(128), 0, s, a, rk);
        else if (a.hd == 64) launch(k_attention<64, true>, grid, dim3(128), 0, s, a, rk);
        else launch(k_attention<0, true>, grid, dim3(128), 0, s, a, rk);
    } else {
        if (a.hd == 128) launch(k_attention<128>, grid, dim3(128), 0, s, a, rk);
        else if (a.hd == 64) launch(k_attention<64>, grid, dim3(128), 0, s, a, rk);
        else launch(k_attention<0>, grid, dim3(128), 0, s, a, rk);
    }
    if (a.splits > 1) launch(k_attention_combine, dim3(unsigned(int64_t(a.n) * a.heads)), dim3(128), 0, s, a);
}

bool attention_tiled(const AttnArgs& a) {
    static const bool tiled = [] { // QASR_CUDA_ATTN_TILED=0 keeps the row-per-warp kernel (A/B)
        const char* e = std::getenv("QASR_CUDA_ATTN_TILED");
        return !(e && std::string(e) == "0");
    }();
    const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    return tiled && a.splits == 1 && a.n > 1 && (a.hd == 128 || a.hd == 64) && a.q_stride % 4 == 0 && a.kv_stride % 4 == 0 &&
           (!a.bq || (aligned(a.bq) && aligned(a.bk) && aligned(a.bv)));
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

QASR_TL_BIND(timeline_bind_attention)

} // namespace qasr::cuda
