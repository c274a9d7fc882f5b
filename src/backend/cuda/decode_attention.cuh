// The decode-attention block body (one new token; q/k RMSNorm + RoPE + KV-cache write + split-key attention +
// merge) as a device function, so that a kernel can run it for any block index: k_decode_attention (kernels.cu)
// once per block, the persistent decode-step kernel (decode_persistent.cu) in its attention phase. Block =
// kDecThreads threads; `block` = kv head · splits + split.
#pragma once
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"

#include <cmath>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace qasr::cuda::detail {

// Decode attention of one new token at position *pos, fused with the q/k RMSNorm + RoPE and the KV-cache write.
// Block (kv head g, split sp), 128 threads: the G = Hq/Hkv query heads of kv head g over the keys of split sp of
// 0..pos, in tiles of kDecTile keys with an online softmax. Every block normalises and rotates its q heads and the
// new k itself (G + 1 rows of hd: cheap); the block whose range holds pos writes the new k, v into the caches and
// reads that key from shared memory. Splits write partials; the last block of a kv head to finish (atomic counter,
// reset by that block for the next step) merges them into o; with a null counter the partials are left for the
// caller to merge.
constexpr int kDecMaxG = 8;
constexpr int kDecTile = 32;
constexpr int kDecThreads = 128;
constexpr int kDecMergeMax = 32; // splits the last block merges from registers and shared memory
constexpr int kDecClusterMax = 16; // splits merged through a cluster (the non-portable cluster size limit of sm_90)
// floats per split partial: acc[hd], max, sum, padded to a multiple of 4 (float4 loads of a record stay aligned)
template <int HD> constexpr int kDecRecord = HD + 4;
static_assert(kDecRecord<128> == decode_partial_floats(128) && kDecRecord<64> == decode_partial_floats(64));

// The body's barrier: named barrier 1 over its kDecThreads threads, so that a larger block (the persistent step)
// can run the body in its first kDecThreads threads while the others skip it.
__device__ __forceinline__ void dec_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kDecThreads) : "memory"); }

// Keys [s0, s1) of split sp when `len` keys are split `splits` ways (the last splits may be empty).
__device__ __forceinline__ void split_keys(int len, int splits, int sp, int& s0, int& s1) {
    const int chunk = (len + splits - 1) / splits;
    s0 = min(len, sp * chunk);
    s1 = min(len, s0 + chunk);
}

// The merge weights of one head's splits: em[s] = m_s (the split's running max) on entry, exp(m_s − M) on return
// (−1: an empty split); L = Σ l_s · exp(m_s − M), in split order (the merged output sums in the same order).
__device__ __forceinline__ void split_weights(float* em, const float* ls, int splits, float& L_out) {
    float M = -INFINITY;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, em[s]);
    float L = 0.0f;
    for (int s = 0; s < splits; ++s) {
        const float ms = em[s];
        float e = -1.0f;
        if (ms > -INFINITY) e = expf(ms - M), L += ls[s] * e;
        em[s] = e;
    }
    L_out = L;
}

// Thread-block clusters (sm_90): the splits of a kv head as one cluster, merging their partials through
// distributed shared memory instead of global memory, a fence, an atomic and a last block.
__device__ __forceinline__ void cluster_sync_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
}
template <class T> __device__ __forceinline__ T* cluster_peer(T* p, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
    return rank == 0 ? p : nullptr;
#endif
}

// GC > 0: the query heads per kv head as a constant (the per-head loops unrolled to exactly GC; the block is a
// long chain of dependent instructions, so their count matters); 0: a.Hq / a.Hkv at run time (≤ kDecMaxG).
// WAIT: the body waits for the previous kernel itself (programmatic dependent launch) after loading what does not
// depend on it — the position (advanced only between steps), the norm weights and RoPE frequencies, and the first
// tile of this split's cached keys and values (written by earlier steps; the new row at pos comes after the wait).
// CL: the block is rank sp of a cluster of a.splits blocks (one kv head; k_decode_attention launched with cluster
// dimension a.splits): the partials stay in shared memory and every block merges 1/splits of the kv head's outputs
// from its peers' shared memory, in the same order and arithmetic as the last-block merge (bit-identical results).
template <int HD, int GC = 0, bool WAIT = false, bool CL = false>
__device__ void decode_attention_block(const DecAttnArgs& a, int block) {
    static_assert(GC >= 0 && GC <= kDecMaxG);
    QASR_TL_ENTRY
    constexpr int GM = GC > 0 ? GC : kDecMaxG;
    constexpr int NW = kDecThreads / kWarp, PER = HD / kWarp, QD = HD / NW;
    static_assert(kDecTile == kWarp && QD % 4 == 0);
    constexpr int DPT = (HD + kDecThreads - 1) / kDecThreads;
    __shared__ __align__(16) float qs[GM][HD];
    __shared__ __align__(16) float kn_s[HD];
    __shared__ __align__(16) float vn_s[HD];
    __shared__ float ps[GM][kDecTile];
    __shared__ float psw[NW][GM][kDecTile]; // partial scores per warp (its quarter of the dims)
    __shared__ float Ms[GM], Ls[GM], resc[GM];
    __shared__ bool last_block;
    const int G = GC > 0 ? GC : a.Hq / a.Hkv;
    const int g = block / a.splits, sp = block % a.splits;
    const int lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
    const int p = *a.pos;
    const int len = p + 1;
    int s0, s1;
    split_keys(len, a.splits, sp, s0, s1);
    const int64_t row = int64_t(a.Hkv) * HD;
    const float* kb = a.kc + int64_t(g) * HD;
    const float* vb = a.vc + int64_t(g) * HD;
    // Keys: lane j holds key j of the tile, warp w its dims [w·QD, (w+1)·QD); the warps' partial scores meet in
    // shared memory (no per-key warp reductions). WAIT: the first tile's cached keys and values (thread: element
    // threadIdx.x of each key) are loaded before the wait, all but the new row p. Without WAIT the body keeps the
    // loads where they are used: after a product that does not trigger this launch early, loading everything at
    // once measured slower (8-bit decode, H200: 1.256 vs 1.166 ms/token with the earlier body).
    float kk[QD];
    float vv[kDecTile];
    auto load_keys = [&](int t0, int nt) {
        const int j = t0 + lane;
        if (lane < nt && j != p) {
            const float4* kr = reinterpret_cast<const float4*>(kb + int64_t(j) * row + w * QD);
#pragma unroll
            for (int i = 0; i < QD / 4; ++i) {
                const float4 f = kr[i];
                kk[4 * i] = f.x, kk[4 * i + 1] = f.y, kk[4 * i + 2] = f.z, kk[4 * i + 3] = f.w;
            }
        }
    };
    if constexpr (WAIT) {
        const int nt = min(kDecTile, s1 - s0);
        load_keys(s0, nt);
        const int d = threadIdx.x;
#pragma unroll
        for (int u = 0; u < kDecTile; ++u) {
            const int jj = s0 + u;
            vv[u] = u < nt && jj != p && d < HD ? vb[int64_t(jj) * row + d] : 0.0f;
        }
    }
    // this warp's first head: norm weights and the rotation (cos, sin at position p) of its lane's elements
    float nw1[PER / 2], nw2[PER / 2], rc[PER / 2], rs[PER / 2];
    if (WAIT && w <= G) {
        const float* nw = w == G ? a.kn : a.qn;
#pragma unroll
        for (int i = 0; i < PER / 2; ++i) {
            const int idx = lane + i * kWarp;
            nw1[i] = nw[idx], nw2[i] = nw[idx + HD / 2];
            const float ang = float(p) * a.inv_freq[idx];
            rc[i] = cosf(ang), rs[i] = sinf(ang);
        }
    }
    if constexpr (WAIT) {
        dep_wait();
        QASR_TL_WAITED(kTlDecAttn, false);
        if (!a.early) dep_launch();
    }
    float vnew[DPT]; // the new value row, loaded together with q and k (one round trip, not two)
#pragma unroll
    for (int j = 0; j < DPT; ++j) {
        const int i = threadIdx.x + j * kDecThreads;
        vnew[j] = i < HD ? __ldcg(a.qkv + (a.Hq + a.Hkv + g) * HD + i) : 0.0f;
    }
    // q heads g·G … g·G+G-1 (scaled by 1/√hd) and k head g: RMSNorm + rotate-half RoPE at position p
    for (int h = w; h <= G; h += NW) {
        const bool isk = h == G;
        const float* src = a.qkv + (isk ? a.Hq + g : g * G + h) * HD;
        const float* nw = isk ? a.kn : a.qn;
        float v[PER];
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            v[i] = __ldcg(src + lane + i * kWarp); // L2: written by other blocks in the persistent step
            ss += v[i] * v[i];
        }
        ss = warp_sum(ss);
        const float inv = rsqrtf(ss / float(HD) + a.eps);
        const float scl = isk ? 1.0f : rsqrtf(float(HD));
        float* dst = isk ? kn_s : qs[h];
#pragma unroll
        for (int i = 0; i < PER / 2; ++i) {
            const int idx = lane + i * kWarp;
            const bool pre = WAIT && h == w;
            const float x1 = v[i] * inv * (pre ? nw1[i] : nw[idx]), x2 = v[i + PER / 2] * inv * (pre ? nw2[i] : nw[idx + HD / 2]);
            float c, sn;
            if (pre) {
                c = rc[i], sn = rs[i];
            } else {
                const float ang = float(p) * a.inv_freq[idx];
                c = cosf(ang), sn = sinf(ang);
            }
            dst[idx] = (x1 * c - x2 * sn) * scl;
            dst[idx + HD / 2] = (x2 * c + x1 * sn) * scl;
        }
    }
#pragma unroll
    for (int j = 0; j < DPT; ++j)
        if (threadIdx.x + j * kDecThreads < HD) vn_s[threadIdx.x + j * kDecThreads] = vnew[j];
    if (threadIdx.x < GM) Ms[threadIdx.x] = -INFINITY, Ls[threadIdx.x] = 0.0f;
    dec_sync();
    if (s0 <= p && p < s1)
        for (int i = threadIdx.x; i < HD; i += kDecThreads) {
            a.kc[int64_t(p) * row + g * HD + i] = kn_s[i];
            a.vc[int64_t(p) * row + g * HD + i] = vn_s[i];
        }
    float acc[GM][DPT];
#pragma unroll
    for (int gg = 0; gg < GM; ++gg)
#pragma unroll
        for (int j = 0; j < DPT; ++j) acc[gg][j] = 0.0f;
    for (int t0 = s0; t0 < s1; t0 += kDecTile) {
        const int nt = min(kDecTile, s1 - t0);
        { // partial scores: lane = key t0 + lane, this warp's quarter of the dims (WAIT: the first tile preloaded)
            if (!WAIT || t0 != s0) load_keys(t0, nt);
            if (lane < nt && t0 + lane == p) { // the new key, normalised and rotated above
#pragma unroll
                for (int i = 0; i < QD; i += 4) {
                    const float4 f = *reinterpret_cast<const float4*>(kn_s + w * QD + i);
                    kk[i] = f.x, kk[i + 1] = f.y, kk[i + 2] = f.z, kk[i + 3] = f.w;
                }
            }
#pragma unroll
            for (int gg = 0; gg < GM; ++gg) {
                if (gg >= G) break;
                float d = 0.0f;
#pragma unroll
                for (int i = 0; i < QD; i += 4) {
                    const float4 q = *reinterpret_cast<const float4*>(&qs[gg][w * QD + i]);
                    d += kk[i] * q.x + kk[i + 1] * q.y + kk[i + 2] * q.z + kk[i + 3] * q.w;
                }
                psw[w][gg][lane] = d;
            }
        }
        dec_sync();
        for (int gg = w; gg < G; gg += NW) { // online softmax update of head gg over this tile
            float sc = -INFINITY;
            if (lane < nt) {
                sc = 0.0f;
#pragma unroll
                for (int ww = 0; ww < NW; ++ww) sc += psw[ww][gg][lane];
            }
            const float Mo = Ms[gg], Mn = fmaxf(Mo, warp_max(sc));
            const float pe = lane < nt ? expf(sc - Mn) : 0.0f;
            if (lane < kDecTile) ps[gg][lane] = pe;
            const float sum = warp_sum(pe);
            __syncwarp(); // every lane has read Ms[gg] before lane 0 replaces it (racecheck: WAR inside the warp)
            if (lane == 0) {
                const float r = expf(Mo - Mn);
                resc[gg] = r;
                Ls[gg] = Ls[gg] * r + sum;
                Ms[gg] = Mn;
            }
        }
        dec_sync();
#pragma unroll
        for (int j = 0; j < DPT; ++j) {
            const int d = threadIdx.x + j * kDecThreads;
            if (HD % kDecThreads != 0 && d >= HD) break;
#pragma unroll
            for (int gg = 0; gg < GM; ++gg)
                if (gg < G) acc[gg][j] *= resc[gg];
            // every value row of the tile loaded before any is used: one memory round trip per tile, not four;
            // the first tile's (element threadIdx.x) came before the wait
            const bool pre = WAIT && j == 0 && t0 == s0;
#pragma unroll
            for (int u = 0; u < kDecTile; ++u) {
                const int jj = t0 + u;
                if (!pre || jj == p) vv[u] = u < nt ? (jj == p ? vn_s[d] : vb[int64_t(jj) * row + d]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < kDecTile; ++u)
#pragma unroll
                for (int gg = 0; gg < GM; ++gg)
                    if (gg < G && u < nt) acc[gg][j] += ps[gg][u] * vv[u];
        }
        dec_sync();
    }
    if constexpr (CL) { // a.splits > 1 (the launcher's condition)
        __shared__ __align__(16) float cpart[GM][HD];
#pragma unroll
        for (int j = 0; j < DPT; ++j) {
            const int d = threadIdx.x + j * kDecThreads;
            if (HD % kDecThreads != 0 && d >= HD) break;
#pragma unroll
            for (int gg = 0; gg < GM; ++gg)
                if (gg < G) cpart[gg][d] = acc[gg][j];
        }
        cluster_sync_all(); // every split's acc, Ms, Ls visible to the cluster
        __shared__ float em[GM][kDecMergeMax];
        __shared__ float Lm[GM];
        for (int i = threadIdx.x; i < G * a.splits; i += kDecThreads) {
            const int gg = i / a.splits, s = i % a.splits;
            em[gg][s] = *cluster_peer(&Ms[gg], s);
            ps[gg][s] = *cluster_peer(&Ls[gg], s);
        }
        dec_sync();
        if (threadIdx.x < G) split_weights(em[threadIdx.x], ps[threadIdx.x], a.splits, Lm[threadIdx.x]);
        dec_sync();
        const int n_out = G * HD, per = (n_out + a.splits - 1) / a.splits;
        const int i0 = sp * per, i1 = min(n_out, i0 + per);
        for (int i = i0 + int(threadIdx.x); i < i1; i += kDecThreads) {
            const int gg = i / HD, d = i % HD;
            float v[kDecClusterMax];
#pragma unroll
            for (int s = 0; s < kDecClusterMax; ++s) v[s] = s < a.splits ? *cluster_peer(&cpart[gg][d], s) : 0.0f;
            float o = 0.0f;
#pragma unroll
            for (int s = 0; s < kDecClusterMax; ++s)
                if (s < a.splits && em[gg][s] >= 0.0f) o += v[s] * em[gg][s];
            a.o[(g * G + gg) * HD + d] = o / Lm[gg];
        }
        cluster_sync_all(); // no block leaves while its peers may still read its shared memory
        return;
    }
    constexpr int PS = kDecRecord<HD>; // partial record: acc[hd], max, sum, 2 floats of padding
#pragma unroll
    for (int j = 0; j < DPT; ++j) { // one split: the result; else this split's partial
        const int d = threadIdx.x + j * kDecThreads;
        if (HD % kDecThreads != 0 && d >= HD) break;
#pragma unroll
        for (int gg = 0; gg < GM; ++gg) {
            if (gg >= G) break;
            if (a.splits == 1) a.o[(g * G + gg) * HD + d] = acc[gg][j] / Ls[gg];
            else a.part[(int64_t(g * G + gg) * a.splits + sp) * PS + d] = acc[gg][j];
        }
    }
    if (a.splits == 1) return;
    if (threadIdx.x < G) {
        float* rec = a.part + (int64_t(g * G + threadIdx.x) * a.splits + sp) * PS;
        rec[HD] = Ms[threadIdx.x];
        rec[HD + 1] = Ls[threadIdx.x];
    }
    if (!a.counter) return; // the caller merges the partials (the persistent step's o-projection stage)
    __threadfence();
    dec_sync();
    if (threadIdx.x == 0) last_block = atomicAdd(a.counter + g, 1u) == unsigned(a.splits - 1);
    dec_sync();
    if (!last_block) return;
    __threadfence();
    // every record field in one round trip, then every partial value a thread needs in a second (splits ≤ kDecMergeMax)
    __shared__ float em[GM][kDecMergeMax]; // m_s, then exp(m_s − M) (−1: empty split)
    __shared__ float Lm[GM];
    for (int i = threadIdx.x; i < G * a.splits; i += kDecThreads) {
        const int gg = i / a.splits, s = i % a.splits;
        const float* rec = a.part + (int64_t(g * G + gg) * a.splits + s) * PS;
        em[gg][s] = __ldcg(rec + HD);
        ps[gg][s] = __ldcg(rec + HD + 1); // l_s (ps is free after the key tiles)
    }
    dec_sync();
    if (threadIdx.x < G) split_weights(em[threadIdx.x], ps[threadIdx.x], a.splits, Lm[threadIdx.x]);
    dec_sync();
    for (int gg = 0; gg < G; ++gg)
        for (int d = threadIdx.x; d < HD; d += kDecThreads) {
            const float* rec = a.part + int64_t(g * G + gg) * a.splits * PS + d;
            float v[kDecMergeMax];
#pragma unroll
            for (int s = 0; s < kDecMergeMax; ++s) v[s] = s < a.splits ? __ldcg(rec + s * PS) : 0.0f;
            float o = 0.0f;
#pragma unroll
            for (int s = 0; s < kDecMergeMax; ++s)
                if (s < a.splits && em[gg][s] >= 0.0f) o += v[s] * em[gg][s];
            a.o[(g * G + gg) * HD + d] = o / Lm[gg];
        }
    if (threadIdx.x == 0) a.counter[g] = 0;
}

} // namespace qasr::cuda::detail
