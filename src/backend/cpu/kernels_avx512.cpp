// AVX-512 (F/BW/VL/DQ) kernel table: float and bf16 products, attention loops, softmax, GELU on 512-bit vectors;
// its quantized products are in kernels_avx512_quant.cpp.
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/avx512_prefetch.hpp"
#include "backend/cpu/kernels_avx512_quant.hpp"
#include "backend/cpu/elementwise.hpp"
#include "backend/cpu/exp_avx512.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qasr::cpu {
namespace {

#include "backend/cpu/kernels_generic.inc"

using namespace a5;


inline __m512 bf16x16(const uint16_t* p) {
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 bf16x16_tail(const uint16_t* p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}

void a5_bf16_gemv(const uint16_t* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* w = W + r * K;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            prefetch_far(w + k);
            a0 = _mm512_fmadd_ps(bf16x16(w + k), _mm512_loadu_ps(x + k), a0);
            a1 = _mm512_fmadd_ps(bf16x16(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
        }
        for (; k < K; k += 16) {
            const __mmask16 m = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1u);
            a0 = _mm512_fmadd_ps(bf16x16_tail(w + k, m), _mm512_maskz_loadu_ps(m, x + k), a0);
        }
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

// a5_bf16_gemv for NB inputs: each 16 weights widened once, then the same two-accumulator FMA chain per input.
template <int NB>
void bf16_gemv_multi_t(const uint16_t* W, int64_t K, const float* const* x, float* const* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* w = W + r * K;
        __m512 a0[NB], a1[NB];
        for (int b = 0; b < NB; ++b) a0[b] = a1[b] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            prefetch_far(w + k);
            const __m512 w0 = bf16x16(w + k), w1 = bf16x16(w + k + 16);
            for (int b = 0; b < NB; ++b) {
                a0[b] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x[b] + k), a0[b]);
                a1[b] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x[b] + k + 16), a1[b]);
            }
        }
        for (; k < K; k += 16) {
            const __mmask16 m = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1u);
            const __m512 w0 = bf16x16_tail(w + k, m);
            for (int b = 0; b < NB; ++b) a0[b] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(m, x[b] + k), a0[b]);
        }
        for (int b = 0; b < NB; ++b) y[b][r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[b], a1[b]));
    }
}

void a5_bf16_gemv_multi(const uint16_t* W, int64_t K, const float* const* x, int nb, float* const* y, int64_t r0,
                        int64_t r1) {
    switch (nb) {
    case 1: return a5_bf16_gemv(W, K, x[0], y[0], r0, r1);
    case 2: return bf16_gemv_multi_t<2>(W, K, x, y, r0, r1);
    case 3: return bf16_gemv_multi_t<3>(W, K, x, y, r0, r1);
    default: return bf16_gemv_multi_t<4>(W, K, x, y, r0, r1);
    }
}

void a5_f32_gemv(const float* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* w = W + r * K;
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            prefetch_far(w + k);
            prefetch_far(w + k + 16);
            a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), a0);
            a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), a1);
        }
        for (; k < K; k += 16) {
            const __mmask16 m = K - k >= 16 ? __mmask16(0xffff) : __mmask16((1u << (K - k)) - 1u);
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + k), _mm512_maskz_loadu_ps(m, x + k), a0);
        }
        y[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    }
}

float a5_dot(const float* a, const float* b, int64_t n) {
    __m512 a0 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a0);
    }
    return _mm512_reduce_add_ps(a0);
}

void a5_axpy(float a, const float* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

// Decode attention. With a position-major cache (one row of all KV heads per position, 4 KiB at 0.6B) walking one
// head's keys touches one page per position; the positions therefore go in blocks of kAttnBlock rows: all heads of
// this call (a contiguous slice of each row) are done on a block before the next, whose slices are prefetched
// meanwhile. (The decoder's KvCache is head-major: it calls with one KV head and ld = hd, one contiguous stream.)
// q (resp. o) stays in registers for hd ≤ 256 and four keys run as independent chains; per (head, key) the
// operations and their order are those of a5_dot / a5_axpy, for float32 and bf16 (widened exactly) caches alike.
constexpr int64_t kAttnBlock = 16;
template <typename T> inline void prefetch_row(const T* p, int64_t n) {
    for (int64_t b = 0; b < n * int64_t(sizeof(T)); b += 64) _mm_prefetch(reinterpret_cast<const char*>(p) + b, _MM_HINT_T0);
}
// 16 cache values as float32: loaded, or bf16 widened (exact).
inline __m512 ld16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 ld16(const uint16_t* p) { return bf16x16(p); }
inline __m512 ld16_tail(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 ld16_tail(const uint16_t* p, __mmask16 m) { return bf16x16_tail(p, m); }
// a5_dot / a5_axpy with the cache operand of type T (the same operations in the same order).
template <typename T> float dot_t(const float* a, const T* b, int64_t n) {
    __m512 a0 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), ld16(b + i), a0);
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), ld16_tail(b + i, m), a0);
    }
    return _mm512_reduce_add_ps(a0);
}
template <typename T> void axpy_t(float a, const T* x, float* y, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, ld16(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, ld16_tail(x + i, m), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

template <typename T>
void attn_scores_t(const float* q, const T* k, int64_t ld, int64_t n, int64_t nkv, int64_t group, int64_t hd,
                   float scale, float* s) {
    if (hd % 16 != 0 || hd > 256) {
        for (int64_t h = 0; h < nkv * group; ++h)
            for (int64_t j = 0; j < n; ++j) s[h * n + j] = dot_t(q + h * hd, k + j * ld + (h / group) * hd, hd) * scale;
        return;
    }
    const int64_t nv = hd / 16;
    for (int64_t j0 = 0; j0 < n; j0 += kAttnBlock) {
        const int64_t j1 = std::min(n, j0 + kAttnBlock);
        for (int64_t h = 0; h < nkv * group; ++h) {
            const T* kh = k + (h / group) * hd;
            const bool pf_k = h % group == 0;
            __m512 qv[16];
            for (int64_t c = 0; c < nv; ++c) qv[c] = _mm512_loadu_ps(q + h * hd + 16 * c);
            float* sh = s + h * n;
            int64_t j = j0;
            for (; j + 4 <= j1; j += 4) {
                if (pf_k)
                    for (int64_t t = j + kAttnBlock; t < std::min(n, j + kAttnBlock + 4); ++t) prefetch_row(kh + t * ld, hd);
                const T* k0 = kh + j * ld;
                __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
                       a3 = _mm512_setzero_ps();
                for (int64_t c = 0; c < nv; ++c) {
                    a0 = _mm512_fmadd_ps(qv[c], ld16(k0 + 16 * c), a0);
                    a1 = _mm512_fmadd_ps(qv[c], ld16(k0 + ld + 16 * c), a1);
                    a2 = _mm512_fmadd_ps(qv[c], ld16(k0 + 2 * ld + 16 * c), a2);
                    a3 = _mm512_fmadd_ps(qv[c], ld16(k0 + 3 * ld + 16 * c), a3);
                }
                sh[j] = _mm512_reduce_add_ps(a0) * scale;
                sh[j + 1] = _mm512_reduce_add_ps(a1) * scale;
                sh[j + 2] = _mm512_reduce_add_ps(a2) * scale;
                sh[j + 3] = _mm512_reduce_add_ps(a3) * scale;
            }
            for (; j < j1; ++j) {
                if (pf_k && j + kAttnBlock < n) prefetch_row(kh + (j + kAttnBlock) * ld, hd);
                __m512 a0 = _mm512_setzero_ps();
                for (int64_t c = 0; c < nv; ++c) a0 = _mm512_fmadd_ps(qv[c], ld16(kh + j * ld + 16 * c), a0);
                sh[j] = _mm512_reduce_add_ps(a0) * scale;
            }
        }
    }
}

template <typename T>
void attn_wsum_t(const float* p, const T* v, int64_t ld, int64_t n, int64_t nkv, int64_t group, int64_t hd, float* o) {
    for (int64_t c = 0; c < nkv * group * hd; ++c) o[c] = 0;
    if (hd % 16 != 0 || hd > 256) {
        for (int64_t h = 0; h < nkv * group; ++h)
            for (int64_t j = 0; j < n; ++j) axpy_t(p[h * n + j], v + j * ld + (h / group) * hd, o + h * hd, hd);
        return;
    }
    const int64_t nv = hd / 16;
    for (int64_t j0 = 0; j0 < n; j0 += kAttnBlock) {
        const int64_t j1 = std::min(n, j0 + kAttnBlock);
        for (int64_t h = 0; h < nkv * group; ++h) {
            const T* vh = v + (h / group) * hd;
            const bool pf_v = h % group == 0;
            __m512 ov[16];
            float* oh = o + h * hd;
            for (int64_t c = 0; c < nv; ++c) ov[c] = _mm512_loadu_ps(oh + 16 * c);
            const float* ph = p + h * n;
            for (int64_t j = j0; j < j1; ++j) {
                if (pf_v && j + kAttnBlock < n) prefetch_row(vh + (j + kAttnBlock) * ld, hd);
                const __m512 pj = _mm512_set1_ps(ph[j]);
                const T* vj = vh + j * ld;
                for (int64_t c = 0; c < nv; ++c) ov[c] = _mm512_fmadd_ps(pj, ld16(vj + 16 * c), ov[c]);
            }
            for (int64_t c = 0; c < nv; ++c) _mm512_storeu_ps(oh + 16 * c, ov[c]);
        }
    }
}

void a5_attn_scores(const float* q, const float* k, int64_t ld, int64_t n, int64_t nkv, int64_t group, int64_t hd,
                    float scale, float* s) {
    attn_scores_t(q, k, ld, n, nkv, group, hd, scale, s);
}
void a5_attn_wsum(const float* p, const float* v, int64_t ld, int64_t n, int64_t nkv, int64_t group, int64_t hd,
                  float* o) {
    attn_wsum_t(p, v, ld, n, nkv, group, hd, o);
}
void a5_attn_scores_bf16(const float* q, const uint16_t* k, int64_t ld, int64_t n, int64_t nkv, int64_t group,
                         int64_t hd, float scale, float* s) {
    attn_scores_t(q, k, ld, n, nkv, group, hd, scale, s);
}
void a5_attn_wsum_bf16(const float* p, const uint16_t* v, int64_t ld, int64_t n, int64_t nkv, int64_t group,
                       int64_t hd, float* o) {
    attn_wsum_t(p, v, ld, n, nkv, group, hd, o);
}

float a5_sum(const float* x, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetch, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetch + 64, _MM_HINT_T0);
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
    }
    float acc = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; i < n; ++i) acc += x[i];
    return acc;
}

double a5_sum_exp(const float* x, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(x + i), vm));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    if (i < n) {
        const __mmask16 k = __mmask16((1u << (n - i)) - 1u);
        const __m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
}

void a5_softmax(float* x, int64_t n) {
    __m512 vmx = _mm512_set1_ps(x[0]);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) vmx = _mm512_max_ps(vmx, _mm512_loadu_ps(x + i));
    if (i < n) vmx = _mm512_mask_max_ps(vmx, __mmask16((1u << (n - i)) - 1u), vmx, _mm512_maskz_loadu_ps(__mmask16((1u << (n - i)) - 1u), x + i));
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(vmx));
    __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        const __m512 e = _mm512_maskz_mov_ps(k, exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vm)));
        _mm512_mask_storeu_ps(x + i, k, e);
        s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    const __m512 inv = _mm512_set1_ps(float(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(s0, s1))));
    for (i = 0; i < n; i += 16) {
        const __mmask16 k = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv));
    }
}

// erf by the 32-interval table of cpu::erf_table: the interval's coefficients are picked per lane with vpermt2ps
// (two registers of 16 per coefficient), Horner in t = |x| − centre, 1 from |x| ≥ 4, the sign of x copied back. NaN
// takes interval 31 and stays NaN.
void a5_gelu_erf(float* x, size_t n) {
    const ErfTable& T = erf_table();
    __m512 lo[8], hi[8];
    for (int j = 0; j < 8; ++j) {
        lo[j] = _mm512_load_ps(T.c[j]);
        hi[j] = _mm512_load_ps(T.c[j] + 16);
    }
    const __m512 ctr_lo = _mm512_load_ps(T.ctr), ctr_hi = _mm512_load_ps(T.ctr + 16);
    const __m512 rs2 = _mm512_set1_ps(float(M_SQRT1_2)), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 eight = _mm512_set1_ps(8.0f), last = _mm512_set1_ps(31.0f), four = _mm512_set1_ps(4.0f);
    const __m512i sign = _mm512_set1_epi32(int32_t(0x80000000u));
    auto gelu = [&](__m512 v) {
        const __m512 z = _mm512_mul_ps(v, rs2);
        const __m512 az = _mm512_abs_ps(z);
        const __m512i idx = _mm512_cvttps_epi32(_mm512_min_ps(_mm512_mul_ps(az, eight), last));
        const __m512 t = _mm512_sub_ps(az, _mm512_permutex2var_ps(ctr_lo, idx, ctr_hi));
        __m512 p = _mm512_permutex2var_ps(lo[7], idx, hi[7]);
        for (int j = 6; j >= 0; --j) p = _mm512_fmadd_ps(p, t, _mm512_permutex2var_ps(lo[j], idx, hi[j]));
        p = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(az, four, _CMP_GE_OQ), p, one);
        const __m512 e = _mm512_castsi512_ps(
            _mm512_or_si512(_mm512_castps_si512(p), _mm512_and_si512(_mm512_castps_si512(z), sign)));
        return _mm512_mul_ps(_mm512_mul_ps(half, v), _mm512_add_ps(one, e));
    };
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, gelu(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 k = __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, k, gelu(_mm512_maskz_loadu_ps(k, x + i)));
    }
}

const KernelTable kAvx512{Isa::Avx512, "avx512",          a5::q_prep,          a5::q_gemv, a5_bf16_gemv,
                          a5_f32_gemv, generic_q_dequant, generic_bf16_to_f32, a5_dot,    a5_axpy,
                          a5_attn_scores,      a5_attn_wsum,      a5_sum,
                          a5_attn_scores_bf16, a5_attn_wsum_bf16, a5_sum_exp, a5_softmax, a5_gelu_erf,
                          a5_bf16_gemv_multi,  a5::q_gemv_multi};

} // namespace

const KernelTable* avx512_kernels() { return &kAvx512; }

} // namespace qasr::cpu
