// ops::decode_step on the CPU: the whole layer stack of one decode step in ONE OpenMP parallel region.
//
// Decoder::forward on one row runs five parallel regions per layer (q/k/v, attention, o, gate/up, down) with the
// norms, RoPE, SiLU and the preparation of x (q_prep) on one thread in between; on the 2-core benchmark machine
// the idle worker goes to sleep during that serial work and each fork costs a wake-up. Here the team stays
// together for the step and the phases are separated by barriers:
//   - the products split their rows over the team (cpu::RowShares: contiguous shares with stealing);
//   - what every product needs whole (the residual stream, its norm, the prepared x) is computed by every thread
//     on its own copy, the same arithmetic on the same values, instead of by one thread behind a barrier;
//   - q/k norms, RoPE, the KV-cache append and attention are split by KV heads: a thread works on the heads whose
//     query, key and value rows it then attends with, so no barrier separates them;
//   - SiLU·up is split by elements.
// Every value is computed by the same kernels in the same order as in Decoder::forward, so the result is bit for
// bit that of the per-op path (and independent of the thread count), except SiLU·up of quantized checkpoints, which
// takes the vectorized exp of their multi-row pass (ops::silu_mul_fast; still independent of the thread count).
#include "ops/decode_step.hpp"

#include "backend/cpu/attention_decode.hpp"
#include "backend/cpu/elementwise.hpp"
#include "backend/cpu/gemv.hpp"
#include "core/error.hpp"
#ifdef QASR_HAVE_AMX
#include "backend/cpu/prefill_avx512.hpp"
#endif
#include "ops/ops.hpp"
#include "ops/vector_ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace qasr::ops {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// Appends KV heads [c0, c1) of one position (k, v: [Hkv·hd] float32) to the cache of `layer`, as KvCache::write
// (bf16 rounded to nearest even by ops::round_to_bf16, bit for bit f32_to_bf16).
void write_heads(KvCache& c, size_t layer, const float* k, const float* v, int64_t pos, int64_t c0, int64_t c1) {
    const int64_t hd = c.head_dim;
    for (int64_t h = c0; h < c1; ++h) {
        const size_t dst = size_t((h * c.cap + pos) * hd), src = size_t(h * hd);
        if (c.bf16) {
            uint16_t* kd = static_cast<uint16_t*>(c.k[layer]) + dst;
            uint16_t* vd = static_cast<uint16_t*>(c.v[layer]) + dst;
            round_to_bf16(k + src, kd, size_t(hd));
            round_to_bf16(v + src, vd, size_t(hd));
        } else {
            std::memcpy(static_cast<float*>(c.k[layer]) + dst, k + src, size_t(hd) * 4);
            std::memcpy(static_cast<float*>(c.v[layer]) + dst, v + src, size_t(hd) * 4);
        }
    }
}

// A barrier for the step's team: the last thread to arrive bumps the generation the others spin on. libgomp's
// barrier cost ≈13 µs per crossing here (168 per token on the 0.6B model: ≈2 ms/token) even when the threads
// arrived together; this one costs the cache-line round trip. A waiter spins with pause for a while, then yields
// its core on every check, so a team that shares the cores with another busy process still progresses.
class SpinBarrier {
public:
    void init(int n) {
        n_ = n;
        count_.store(0, std::memory_order_relaxed);
    }
    void wait() {
        if (n_ <= 1) return;
        const uint32_t g = gen_.load(std::memory_order_acquire);
        if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
            count_.store(0, std::memory_order_relaxed);
            gen_.store(g + 1, std::memory_order_release);
            return;
        }
        for (int spins = 0; gen_.load(std::memory_order_acquire) == g; ++spins) {
            if (spins < kSpins) cpu_relax();
            else std::this_thread::yield();
        }
    }

private:
    static constexpr int kSpins = 20000; // ≈ 0.1–1 ms of pause loops before yielding
    alignas(64) std::atomic<int> count_{0};
    alignas(64) std::atomic<uint32_t> gen_{0};
    int n_ = 1;
};

constexpr int64_t kBlocksPerThread = 256; // row blocks per thread and product (cpu::RowShares: ≥ 16 rows each)

// Activations shared by the team, kept between steps (one set per calling thread).
struct Shared {
    std::vector<float> q, k, v, o, a, g, up, cs;
    std::unique_ptr<cpu::RowShares[]> shares; // 4 per layer: q/k/v, o, gate/up, down
    SpinBarrier barrier;
    size_t n_shares = 0;
};

} // namespace

void decode_step(const DecoderW& w, const TextHParams& hp, const float* inv_freq, float* x, KvCache& cache) {
    KvCache* c = &cache;
    decode_step_batch(w, hp, inv_freq, x, 1, &c);
}

void decode_step_batch(const DecoderW& w, const TextHParams& hp, const float* inv_freq, float* x, int64_t B,
                       KvCache* const* caches) {
    const int64_t D = hp.hidden, hd = hp.head_dim, Hq = hp.n_heads, Hkv = hp.n_kv_heads, group = Hq / Hkv;
    const size_t L = w.layers.size();
    if (B < 1) fail("decoder", "a decode step needs at least one row");
    const int64_t Nq = Hq * hd, Nkv = Hkv * hd, I = L ? w.layers[0].gate.w.rows : 0;
    for (const DecoderLayerW& l : w.layers)
        if (l.q.w.rows != Nq || l.k.w.rows != Nkv || l.v.w.rows != Nkv || l.o.w.rows != D || l.o.w.cols != Nq ||
            l.q.w.cols != D || l.gate.w.rows != I || l.up.w.rows != I || l.down.w.rows != D || l.down.w.cols != I)
            fail("decoder", "layer matrices of different shapes");
    std::vector<int64_t> past(static_cast<size_t>(B));
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b) {
        KvCache& cache = *caches[b];
        for (int64_t e = 0; e < b; ++e)
            if (caches[e] == caches[b]) fail("decoder", "a batched decode step got one KV cache twice");
        past[size_t(b)] = cache.len;
        longest = std::max(longest, cache.len + 1);
        if (cache.k.size() != L) cache.reset(L);
        cache.reserve(cache.len + 1, Hkv, hd, kv_cache_bf16(w.bf16_compute));
    }

    thread_local Shared store; // the caller's; the team sees it through `sh`
    Shared& sh = store;
    sh.q.resize(size_t(B * Nq));
    sh.k.resize(size_t(B * Nkv));
    sh.v.resize(size_t(B * Nkv));
    sh.o.resize(size_t(B * Nq));
    sh.a.resize(size_t(B * D));
    sh.g.resize(size_t(B * I));
    sh.up.resize(size_t(B * I));
    sh.cs.resize(size_t(B * hd));
    for (int64_t b = 0; b < B; ++b) rope_table(1, hd, past[size_t(b)], inv_freq, sh.cs.data() + b * hd);
    if (sh.n_shares < 4 * L) {
        sh.shares.reset(new cpu::RowShares[4 * L]);
        sh.n_shares = 4 * L;
    }
    const int nt = num_threads();
    for (size_t li = 0; li < L; ++li) {
        sh.shares[4 * li].init(Nq + 2 * Nkv, nt, kBlocksPerThread);
        sh.shares[4 * li + 1].init(D, nt, kBlocksPerThread);
        sh.shares[4 * li + 2].init(2 * I, nt, kBlocksPerThread);
        sh.shares[4 * li + 3].init(D, nt, kBlocksPerThread);
    }
    const cpu::KernelTable& K = cpu::kernels();
    // SiLU with the vectorized exp for quantized checkpoints (the bf16-compute path, as their multi-row pass:
    // ops::silu_mul_fast's kernel, called directly, since its own one-thread parallel region nested in the step's
    // costs about what the SiLU does); float checkpoints keep ops::silu_mul's arithmetic.
    void (*silu)(float*, const float*, size_t) = cpu::silu_mul_serial;
#ifdef QASR_HAVE_AMX
    if (w.bf16_compute && K.isa == cpu::Isa::Avx512) silu = cpu::silu_mul_avx512;
#endif
    const float scale = 1.0f / std::sqrt(float(hd)), eps = hp.rms_eps;

#pragma omp parallel num_threads(nt)
    {
        const int t = omp_get_thread_num(), T = omp_get_num_threads();
#pragma omp single
        sh.barrier.init(T);
        const int64_t c0 = Hkv * t / T, c1 = Hkv * (t + 1) / T; // this thread's KV heads
        const int64_t e0 = I * t / T, e1 = I * (t + 1) / T;     // and its share of SiLU·up
        thread_local std::vector<cpu::GemvInput> in;
        thread_local std::vector<float> xt, u, s;
        if (in.size() < size_t(B)) in.resize(size_t(B));
        xt.assign(x, x + B * D); // the residual streams, one copy per thread
        u.resize(size_t(B * D));
        s.resize(size_t((c1 - c0) * group * longest));
        float *q = sh.q.data(), *k = sh.k.data(), *v = sh.v.data(), *o = sh.o.data(), *a = sh.a.data();
        float *g = sh.g.data(), *up = sh.up.data();
        // The rows of the batch share each block of weights: the tables' multi-input kernels load and widen a
        // block once for up to 4 rows (the single-row kernel per row otherwise, the block then still in the
        // cache), with each row's operations those of its single step, so its result is bit for bit the same.
        const auto product = [&](cpu::RowShares& rows, const float* xin, int64_t ldx,
                                 std::initializer_list<const WeightMatrix*> Ws, std::initializer_list<float*> ys) {
            const size_t n = Ws.size();
            for (int64_t b = 0; b < B; ++b) in[size_t(b)].prepare(K, xin + b * ldx, Ws.begin(), n);
            rows.run(t, [&](int64_t r0, int64_t r1) {
                if (B == 1) cpu::gemv_multi_rows(K, in[0], Ws.begin(), ys.begin(), n, r0, r1);
                else cpu::gemv_multi_rows_batch(K, in.data(), int(B), Ws.begin(), ys.begin(), n, r0, r1);
            });
        };
        for (size_t li = 0; li < L; ++li) {
            const DecoderLayerW& l = w.layers[li];
            std::memcpy(u.data(), xt.data(), size_t(B * D) * 4);
            for (int64_t b = 0; b < B; ++b) cpu::rms_norm_serial(u.data() + b * D, 1, D, l.in_norm.ptr(), eps);
            product(sh.shares[4 * li], u.data(), D, {&l.q.w, &l.k.w, &l.v.w}, {q, k, v});
            sh.barrier.wait();
            if (c0 < c1)
                for (int64_t b = 0; b < B; ++b) {
                    KvCache& cache = *caches[b];
                    float *qb = q + b * Nq, *kb = k + b * Nkv, *vb = v + b * Nkv;
                    const float* cs = sh.cs.data() + b * hd;
                    float* qh = qb + c0 * group * hd;
                    cpu::rms_norm_serial(qh, (c1 - c0) * group, hd, l.q_norm.ptr(), eps);
                    cpu::rms_norm_serial(kb + c0 * hd, c1 - c0, hd, l.k_norm.ptr(), eps);
                    rope_cs(qh, 1, (c1 - c0) * group, hd, cs);
                    rope_cs(kb + c0 * hd, 1, c1 - c0, hd, cs);
                    write_heads(cache, li, kb, vb, past[size_t(b)], c0, c1);
                    KvView kv;
                    kv.head_stride = cache.cap * hd;
                    kv.pos_stride = hd;
                    kv.bf16 = cache.bf16;
                    kv.k = cache.k[li];
                    kv.v = cache.v[li];
                    cpu::attend_one(K, qb, kv, o + b * Nq, past[size_t(b)] + 1, c0, c1, group, hd, scale, s.data());
                }
            sh.barrier.wait();
            product(sh.shares[4 * li + 1], o, Nq, {&l.o.w}, {a});
            sh.barrier.wait();
            for (int64_t b = 0; b < B; ++b) {
                float *xb = xt.data() + b * D, *ub = u.data() + b * D;
                add(xb, a + b * D, size_t(D));
                std::memcpy(ub, xb, size_t(D) * 4);
                cpu::rms_norm_serial(ub, 1, D, l.post_norm.ptr(), eps);
            }
            product(sh.shares[4 * li + 2], u.data(), D, {&l.gate.w, &l.up.w}, {g, up});
            sh.barrier.wait();
            for (int64_t b = 0; b < B; ++b) silu(g + b * I + e0, up + b * I + e0, size_t(e1 - e0));
            sh.barrier.wait();
            product(sh.shares[4 * li + 3], g, I, {&l.down.w}, {a});
            sh.barrier.wait();
            for (int64_t b = 0; b < B; ++b) add(xt.data() + b * D, a + b * D, size_t(D));
        }
        if (t == 0) std::memcpy(x, xt.data(), size_t(B * D) * 4);
    }
    for (int64_t b = 0; b < B; ++b) caches[b]->len = past[size_t(b)] + 1;
    rms_norm(x, B, D, w.norm.ptr(), hp.rms_eps);
}

} // namespace qasr::ops
