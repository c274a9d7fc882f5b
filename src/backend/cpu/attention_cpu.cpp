// CPU attention: windowed bidirectional (encoder) and causal over a KV cache (decoder prefill and steps).
// Scores and softmax in float32. Several queries at once (encoder windows, prefill): per (head, window) two
// single-threaded sgemm calls (S = Q·Kᵀ, O = P·V on strided head slices) over the OpenMP team; one query (decode
// steps) or no BLAS: per-key dot/axpy kernels of the active ISA, parallel over (head, query).
#include "backend/cpu/attention_decode.hpp"
#include "backend/cpu/kernels.hpp"
#ifdef QASR_HAVE_AMX
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/prefill_avx512.hpp"
#endif
#include "ops/ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#ifdef QASR_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace qasr::ops {

#ifdef QASR_HAVE_OPENBLAS
namespace {

// One head over a block of nq queries (rows of q at stride ldq) against nk keys/values (stride ldk): o = softmax(
// scale·q·kᵀ, rows limited to `visible(i)` keys) · v. s: scratch [nq, nk].
template <typename Visible>
void head_block(const float* q, int64_t ldq, const float* k, const float* v, int64_t ldk, float* o, int64_t ldo,
                int64_t nq, int64_t nk, int64_t hd, float scale, float* s, Visible visible,
                void (*softmax)(float*, int64_t) = softmax_row) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(nq), int(nk), int(hd), scale, q, int(ldq), k, int(ldk),
                0.0f, s, int(nk));
    for (int64_t i = 0; i < nq; ++i) {
        float* row = s + i * nk;
        const int64_t len = visible(i);
        softmax(row, len);
        for (int64_t j = len; j < nk; ++j) row[j] = 0.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(nq), int(hd), int(nk), 1.0f, s, int(nk), v, int(ldk),
                0.0f, o, int(ldo));
}

} // namespace
#endif

void windowed_attention(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t heads,
                        int64_t hd, int64_t window) {
    const int64_t D = heads * hd;
    const float scale = 1.0f / std::sqrt(float(hd));
    // float checkpoints: ops::softmax_row (the reference arithmetic); the bf16 scope (quantized checkpoints, whose
    // products round to bf16 already) takes the table's softmax (vector exp, as the decoder over a bf16 cache)
    void (*const softmax)(float*, int64_t) = bf16_gemm_enabled() ? cpu::kernels().softmax : softmax_row;
#ifdef QASR_HAVE_OPENBLAS
    {
        const int64_t nw = (n + window - 1) / window;
#pragma omp parallel
        {
            std::vector<float> sc(static_cast<size_t>(window * window));
#pragma omp for collapse(2) schedule(dynamic, 1)
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t w = 0; w < nw; ++w) {
                    const int64_t w0 = w * window, len = std::min(n, w0 + window) - w0;
                    head_block(q + w0 * D + h * hd, D, k + w0 * D + h * hd, v + w0 * D + h * hd, D,
                               o + w0 * D + h * hd, D, len, len, hd, scale, sc.data(), [&](int64_t) { return len; },
                               softmax);
                }
        }
        return;
    }
#endif
    const cpu::KernelTable& K = cpu::kernels();
#pragma omp parallel
    {
        std::vector<float> s(static_cast<size_t>(window));
#pragma omp for collapse(2) schedule(static)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t w0 = (i / window) * window, w1 = std::min(n, w0 + window);
                const float* qi = q + i * D + h * hd;
                for (int64_t j = w0; j < w1; ++j) {
                    const float* kj = k + j * D + h * hd;
                    s[size_t(j - w0)] = K.dot(qi, kj, hd) * scale;
                }
                softmax(s.data(), w1 - w0);
                float* oi = o + i * D + h * hd;
                for (int64_t c = 0; c < hd; ++c) oi[c] = 0;
                for (int64_t j = w0; j < w1; ++j) {
                    const float p = s[size_t(j - w0)];
                    const float* vj = v + j * D + h * hd;
                    K.axpy(p, vj, oi, hd);
                }
            }
    }
}

void causal_attention(const float* q, const float* kc, const float* vc, float* o, int64_t n, int64_t past,
                      int64_t Hq, int64_t Hkv, int64_t hd) {
    KvView kv;
    kv.k = kc;
    kv.v = vc;
    kv.head_stride = hd;
    kv.pos_stride = Hkv * hd;
    causal_attention(q, kv, o, n, past, Hq, Hkv, hd);
}

void causal_attention(const float* q, const KvView& kv, float* o, int64_t n, int64_t past, int64_t Hq, int64_t Hkv,
                      int64_t hd) {
    const int64_t group = Hq / Hkv, Dq = Hq * hd, total = past + n;
    const float scale = 1.0f / std::sqrt(float(hd));
#ifdef QASR_HAVE_AMX
    // Several queries over a head-major bf16 cache (the prefill of quantized checkpoints) on AMX tiles, with the
    // table's softmax as below; float32 caches (the reference path) keep sgemm.
    if (n > 1 && kv.bf16 && kv.pos_stride == hd && hd % 64 == 0 && cpu::kernels().isa == cpu::Isa::Avx512 &&
        cpu::amx_available()) {
        cpu::amx_causal_attention(q, static_cast<const uint16_t*>(kv.k), static_cast<const uint16_t*>(kv.v),
                                  kv.head_stride, o, n, past, Hq, Hkv, hd, cpu::kernels().softmax);
        return;
    }
#endif
#ifdef QASR_HAVE_OPENBLAS
    const int64_t hs = kv.head_stride, ps = kv.pos_stride;
    const auto* kf = static_cast<const float*>(kv.k);
    const auto* vf = static_cast<const float*>(kv.v);
    const auto* kb = static_cast<const uint16_t*>(kv.k);
    const auto* vb = static_cast<const uint16_t*>(kv.v);
    if (n > 1) {
        // One KV head per iteration with the query heads that share it (GQA): a bf16 head is widened once for
        // them. Scratch without zero-fill (every value read is written first). A float32 cache keeps
        // ops::softmax_row (the reference arithmetic); a bf16 cache (quantized checkpoints) takes the table's
        // vectorized softmax, as the decode step does. With more threads than KV heads: one query head per
        // iteration, each widening its own copy.
        const cpu::KernelTable& K = cpu::kernels();
        const int64_t per_unit = num_threads() <= Hkv ? group : 1, units = Hq / per_unit;
#pragma omp parallel
        {
            std::unique_ptr<float[]> sc(new float[size_t(n * total)]);
            std::unique_ptr<float[]> kw, vw; // a bf16 head widened to float32
            if (kv.bf16) {
                kw.reset(new float[size_t(total * hd)]);
                vw.reset(new float[size_t(total * hd)]);
            }
#pragma omp for schedule(static)
            for (int64_t u = 0; u < units; ++u) {
                const int64_t h0 = u * per_unit, kvh = h0 / group;
                const float *kh, *vh;
                int64_t ld = ps;
                if (kv.bf16) {
                    if (ps == hd) {
                        K.bf16_to_f32(kb + kvh * hs, kw.get(), size_t(total * hd));
                        K.bf16_to_f32(vb + kvh * hs, vw.get(), size_t(total * hd));
                    } else
                        for (int64_t j = 0; j < total; ++j) {
                            K.bf16_to_f32(kb + kvh * hs + j * ps, kw.get() + j * hd, size_t(hd));
                            K.bf16_to_f32(vb + kvh * hs + j * ps, vw.get() + j * hd, size_t(hd));
                        }
                    kh = kw.get();
                    vh = vw.get();
                    ld = hd;
                } else {
                    kh = kf + kvh * hs;
                    vh = vf + kvh * hs;
                }
                for (int64_t h = h0; h < h0 + per_unit; ++h)
                    head_block(q + h * hd, Dq, kh, vh, ld, o + h * hd, Dq, n, total, hd, scale, sc.get(),
                               [&](int64_t i) { return past + i + 1; }, kv.bf16 ? K.softmax : softmax_row);
            }
        }
        return;
    }
#endif
    // Each thread takes a contiguous range of KV heads (with the query heads sharing them): cpu::attend_one.
    const cpu::KernelTable& K = cpu::kernels();
    const int nt = int(std::min<int64_t>(num_threads(), Hkv));
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
        const int t = omp_get_thread_num();
        const int64_t c0 = Hkv * t / nt, c1 = Hkv * (t + 1) / nt;
        std::vector<float> s(static_cast<size_t>((c1 - c0) * group * total));
        for (int64_t i = 0; i < n; ++i)
            cpu::attend_one(K, q + i * Dq, kv, o + i * Dq, past + i + 1, c0, c1, group, hd, scale, s.data());
    }
}

} // namespace qasr::ops
