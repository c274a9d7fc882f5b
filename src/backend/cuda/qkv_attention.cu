// The decode step's q/k/v product and its attention as one kernel (bf16 weights, sm_90).
//
// The attention of kv head g needs only g's rows of the q/k/v product (its G query heads, its key and its value),
// so the kernel boundary between the two is a dependency inside each kv head, not across the grid. Here the blocks
// of one kv head form a thread-block cluster: each computes a slice of that head's rows exactly as the prefetching
// product does (matvec_pf.cuh: its weights bulk-copied before the dependency wait), the cluster meets at a barrier
// (release/acquire at cluster scope: the rows are in L2 for the peers), and the same blocks then run the decode
// attention as the head's key splits, merging through distributed shared memory (decode_attention.cuh, CL). Before
// the wait every block also asks L2 for its split's cached keys and values (written by earlier steps).
//
// The 0.6B shapes: 16 query heads, 8 kv heads of 128, width 1024 → 8 clusters of 16 blocks, 32 rows (64 KB) each —
// the same slices as the separate product's 128 blocks. Other shapes keep the two kernels.
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_attention.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/matvec_pf.cuh"

#include <cstdlib>
#include <mutex>
#include <string>

namespace qasr::cuda {
namespace {

using namespace detail;

constexpr int kQaCluster = 16; // blocks per kv head = its key splits

// Block (kv head g = blockIdx.x / a.splits, rank r): rows [r·rpb, (r+1)·rpb) of g's q|k|v rows, which lie inside one
// of the three parts (hd % rpb == 0, checked by the launcher), then key split r of g's attention.
template <int KC, int HD, int GC>
__global__ void __launch_bounds__(kPfThreads, 2) k_qkv_attention(PfArgs p, DecAttnArgs a) {
    const int cs = a.splits;
    const int g = int(blockIdx.x) / cs, r = int(blockIdx.x) % cs;
    const int G = GC > 0 ? GC : a.Hq / a.Hkv;
    const int gl = r * p.rpb;
    int64_t r0;
    if (gl < G * HD) r0 = int64_t(g) * G * HD + gl;
    else if (gl < (G + 1) * HD) r0 = int64_t(a.Hq + g) * HD + (gl - G * HD);
    else r0 = int64_t(a.Hq + a.Hkv + g) * HD + (gl - (G + 1) * HD);
    { // this split's cached keys and values into L2 (the position only moves between steps)
        int s0, s1;
        split_keys(*a.pos + 1, cs, r, s0, s1);
        constexpr int LPR = HD * 4 / 128; // 128-byte lines per cached row of one head
        const int n = (s1 - s0) * LPR;
        const int64_t row = int64_t(a.Hkv) * HD;
        for (int i = int(threadIdx.x); i < 2 * n; i += kPfThreads) {
            const int j = i % n;
            prefetch_l2((i < n ? a.kc : a.vc) + (s0 + j / LPR) * row + g * HD + (j % LPR) * 32);
        }
    }
    pf_rows<KC, int(Epi::Store)>(p, r0);
    cluster_sync_all(); // the kv head's q, k, v rows are written
    if (threadIdx.x < kDecThreads) {
        decode_attention_block<HD, GC, false, true>(a, int(blockIdx.x));
    } else { // the body's two cluster barriers (its merge), which every thread of the cluster takes
        cluster_sync_all();
        cluster_sync_all();
    }
}

bool g_on = [] { // QASR_CUDA_QKV_ATTN=0: the separate product and attention kernels (A/B)
    const char* e = std::getenv("QASR_CUDA_QKV_ATTN");
    return !(e && std::string(e) == "0");
}();

constexpr int kMaxDevices = 64;
bool g_ok[kMaxDevices];
std::once_flag g_once[kMaxDevices];

} // namespace

bool qkv_attention(const DMat& W, const float* x, const float* norm_w, float eps, float* qkv, const DecAttnArgs& da,
                   cudaStream_t s) {
    if (!g_on || W.bits != 16 || !pdl_enabled() || !norm_w) return false;
    constexpr int KC = 4, HD = 128, GC = 2;
    const int64_t K = W.cols;
    if (K != KC * 256 || da.hd != HD || da.Hkv <= 0 || da.Hq != GC * da.Hkv || W.rows != int64_t(da.Hq + 2 * da.Hkv) * HD)
        return false;
    const int rpb = (GC + 2) * HD / kQaCluster;
    if (HD % rpb != 0) return false;
    const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (!aligned(W.data) || !aligned(x) || !aligned(norm_w) || !qkv) return false;
    const size_t smem = size_t(rpb) * size_t(K) * 2 + size_t(K) * 8;
    if (smem > kPfMaxSmem) return false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= kMaxDevices) return false;
    auto* k = k_qkv_attention<KC, HD, GC>;
    std::call_once(g_once[dev], [&] {
        int major = 0;
        QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        if (major < 9) return;
        QASR_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kPfMaxSmem)));
        g_ok[dev] = cluster_ok(k, kQaCluster, kPfThreads, smem);
    });
    if (!g_ok[dev]) return false;
    PfArgs p{static_cast<const uint16_t*>(W.data), W.rows, 0, rpb, x, norm_w, eps, qkv, 0};
    DecAttnArgs a = da;
    a.qkv = qkv;
    a.splits = kQaCluster, a.cluster = true, a.early = false, a.pre_wait = false;
    launch_cluster(k, kQaCluster, dim3(unsigned(da.Hkv * kQaCluster)), kPfThreads, smem, s, p, a);
    QASR_CUDA_LAUNCHED();
    return true;
}

} // namespace qasr::cuda
