// AVX2 + FMA kernel table (compiled with -mavx2 -mfma -mf16c; chosen at start-up only on CPUs that have them).
// Quantized products: 8-, 6- and 4-bit codes (gs % 32 == 0) go through int16 arithmetic — x rounded per group to
// int16 (scale max|x_g|/32767, relative error ≤ 1.5e-5, as the AVX-512 VNNI path), codes widened to int16,
// vpmaddwd pairs summed in int32 (exact), one float multiply-add per group — half or less of the instructions of
// widening the codes to float; other group sizes use fused dequantize + FMA: codes widened to float
// and multiplied with x permuted into the order the codes come out of the unpacking. Scale applied per group, bias
// via the group sums of x.
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/transpose8.hpp"
#include "backend/cpu/elementwise.hpp"

#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace qasr::cpu {
namespace {

#include "backend/cpu/kernels_generic.inc"

constexpr int64_t kPrefetch = 2048; // bytes ahead in the weight stream (software prefetch)

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

inline __m256 u8x8_to_ps(__m128i b) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b)); }

// Whether the int16 path takes these codes (then q_prep writes int16 x, natural order, in the first K/2 floats of
// xp and the group scales sx[K/gs] after them).
// 8/4-bit x̂ in column order; 6-bit per 32 columns the pairs (4i, 4i+1), then the pairs (4i+2, 4i+3), i < 8.
constexpr bool i16_for(int bits, int gs) { return (bits == 8 || bits == 6 || bits == 4) && gs % 32 == 0; }

// x order per 32-column block on the float path: 4-bit: the 16 even columns then the 16 odd ones; 6-bit: columns
// 4i+r for r = 0..3 (i < 8); 8-bit: natural order.
void a2_q_prep(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) {
    group_sums(x, K, gs, xs);
    if (i16_for(bits, gs)) {
        int16_t* xi = reinterpret_cast<int16_t*>(xp);
        float* sx = xp + K / 2;
        const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
        for (int64_t g = 0; g < K / gs; ++g) {
            const float* xg = x + g * gs;
            __m256 mx = _mm256_setzero_ps();
            for (int j = 0; j < gs; j += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(xg + j), abs_mask));
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            const float m = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
            const float sc = m > 0 ? m / 32767.0f : 1.0f;
            sx[g] = sc;
            const __m256 vi = _mm256_set1_ps(1.0f / sc);
            // 16 columns: round to nearest even (MXCSR), pack with saturation, lanes back in column order
            const auto q16 = [&](const float* p) {
                const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p), vi));
                const __m256i b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(p + 8), vi));
                return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
            };
            __m256i* o = reinterpret_cast<__m256i*>(xi + g * gs);
            if (bits == 6) { // 32-bit units = column pairs: even pairs of both halves, then the odd ones
                const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
                for (int j = 0; j < gs; j += 32) {
                    const __m256i a = _mm256_permutevar8x32_epi32(q16(xg + j), split);
                    const __m256i b = _mm256_permutevar8x32_epi32(q16(xg + j + 16), split);
                    _mm256_storeu_si256(o + j / 16, _mm256_permute2x128_si256(a, b, 0x20));
                    _mm256_storeu_si256(o + j / 16 + 1, _mm256_permute2x128_si256(a, b, 0x31));
                }
            } else {
                for (int j = 0; j < gs; j += 16) _mm256_storeu_si256(o + j / 16, q16(xg + j));
            }
        }
        return;
    }
    float_path_order(x, K, bits, 32, xp);
}

// Dot products of one group's codes with NB inputs' xp (gs values from `off`), unscaled: each chunk of codes
// converted to floats once, then a two-accumulator FMA chain per input, the same for every NB (so an input's
// result does not depend on how many run together).
template <int BITS, int NB> inline void group_dot_multi(const uint8_t* p, const float* const* xp, int64_t off, int gs,
                                                        __m256* out) {
    __m256 a0[NB], a1[NB];
    for (int b = 0; b < NB; ++b) a0[b] = a1[b] = _mm256_setzero_ps();
    const auto step = [&](__m256 w0, __m256 w1, int64_t j) {
        for (int b = 0; b < NB; ++b) {
            a0[b] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp[b] + off + j), a0[b]);
            a1[b] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp[b] + off + j + 8), a1[b]);
        }
    };
    if constexpr (BITS == 8) {
        for (int j = 0; j < gs; j += 16) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j));
            step(u8x8_to_ps(b), u8x8_to_ps(_mm_srli_si128(b, 8)), j);
        }
    } else if constexpr (BITS == 4) {
        const __m128i m4 = _mm_set1_epi8(15);
        for (int j = 0; j < gs; j += 32) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j / 2));
            const __m128i lo = _mm_and_si128(b, m4), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m4);
            step(u8x8_to_ps(lo), u8x8_to_ps(_mm_srli_si128(lo, 8)), j);
            step(u8x8_to_ps(hi), u8x8_to_ps(_mm_srli_si128(hi, 8)), j + 16);
        }
    } else { // 6
        const __m256i shuf = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, //
                                              4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
        const __m256i m6 = _mm256_set1_epi32(63);
        for (int j = 0; j < gs; j += 32) {
            const uint8_t* q = p + j / 4 * 3;
            const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
            const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8));
            const __m256i d = _mm256_shuffle_epi8(_mm256_set_m128i(hi, lo), shuf);
            step(_mm256_cvtepi32_ps(_mm256_and_si256(d, m6)),
                 _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d, 6), m6)), j);
            step(_mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(d, 12), m6)),
                 _mm256_cvtepi32_ps(_mm256_srli_epi32(d, 18)), j + 16);
        }
    }
    for (int b = 0; b < NB; ++b) out[b] = _mm256_add_ps(a0[b], a1[b]);
}

// The int16 path's group dot products (i16_for): Σ q·x̂ over the group in int32 lanes (exact), as float times
// the input's group scale sx — the same unscaled sums as group_dot_multi up to x's int16 rounding.
template <int BITS, int NB> inline void group_dot_i16(const uint8_t* p, const float* const* xp, int64_t K, int64_t g,
                                                      int gs, __m256* out) {
    __m256i d[NB];
    for (int b = 0; b < NB; ++b) d[b] = _mm256_setzero_si256();
    const auto step = [&](__m256i w, int64_t j) { // 16 codes as int16, columns g·gs + j …
        for (int b = 0; b < NB; ++b) {
            const int16_t* xi = reinterpret_cast<const int16_t*>(xp[b]) + g * gs + j;
            d[b] = _mm256_add_epi32(d[b], _mm256_madd_epi16(w, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi))));
        }
    };
    if constexpr (BITS == 8) {
        for (int j = 0; j < gs; j += 16)
            step(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j))), j);
    } else if constexpr (BITS == 6) { // 32 columns = 24 bytes: a 3-byte group of 4 codes per 32-bit lane, split
        const __m256i shuf = _mm256_setr_epi8(0, 1, 2, -1, 3, 4, 5, -1, 6, 7, 8, -1, 9, 10, 11, -1, //
                                              4, 5, 6, -1, 7, 8, 9, -1, 10, 11, 12, -1, 13, 14, 15, -1);
        const __m256i lo6 = _mm256_set1_epi32(63), hi6 = _mm256_set1_epi32(63 << 16);
        for (int j = 0; j < gs; j += 32) {
            const uint8_t* q = p + j / 4 * 3;
            const __m256i t = _mm256_shuffle_epi8(
                _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8)),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
                shuf);
            // lane i: codes 4i | 4i+1 << 16, then 4i+2 | 4i+3 << 16
            step(_mm256_or_si256(_mm256_and_si256(t, lo6), _mm256_and_si256(_mm256_slli_epi32(t, 10), hi6)), j);
            step(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(t, 12), lo6),
                                 _mm256_and_si256(_mm256_srli_epi32(t, 2), hi6)),
                 j + 16);
        }
    } else { // 4: a byte holds columns 2i (low nibble) and 2i+1; interleaved back into column order
        const __m128i m4 = _mm_set1_epi8(15);
        for (int j = 0; j < gs; j += 32) {
            const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j / 2));
            const __m128i lo = _mm_and_si128(c, m4), hi = _mm_and_si128(_mm_srli_epi16(c, 4), m4);
            step(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(lo, hi)), j);
            step(_mm256_cvtepu8_epi16(_mm_unpackhi_epi8(lo, hi)), j + 16);
        }
    }
    for (int b = 0; b < NB; ++b) out[b] = _mm256_mul_ps(_mm256_cvtepi32_ps(d[b]), _mm256_set1_ps((xp[b] + K / 2)[g]));
}

// One group's unscaled dot products for NB inputs on the path q_prep chose.
template <int BITS, int NB> inline void group_dots(const uint8_t* p, const float* const* xp, int64_t K, int64_t g,
                                                   int gs, __m256* out) {
    if (i16_for(BITS, gs)) return group_dot_i16<BITS, NB>(p, xp, K, g, gs, out);
    group_dot_multi<BITS, NB>(p, xp, g * gs, gs, out);
}

template <int BITS>
void q_gemv_t(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int gs, const float* xp,
              const float* xs, float* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * BITS / 8, gbytes = int64_t(gs) * BITS / 8;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m256 acc = _mm256_setzero_ps();
        float bsum = 0;
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* pg = row + g * gbytes;
            for (int64_t o = 0; o < gbytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pg + kPrefetch + o), _MM_HINT_T0);
            __m256 dot;
            group_dots<BITS, 1>(pg, &xp, K, g, gs, &dot);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(bf16f(sc[g])), dot, acc);
            bsum += bf16f(bi[g]) * xs[g];
        }
        y[r] = hsum(acc) + bsum;
    }
}

template <int BITS, int NB>
void q_gemv_multi_t(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int gs,
                    const float* const* xp, const float* const* xs, float* const* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * BITS / 8, gbytes = int64_t(gs) * BITS / 8;
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m256 acc[NB], dots[NB];
        float bsum[NB];
        for (int b = 0; b < NB; ++b) acc[b] = _mm256_setzero_ps(), bsum[b] = 0;
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* pg = row + g * gbytes;
            for (int64_t o = 0; o < gbytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pg + kPrefetch + o), _MM_HINT_T0);
            group_dots<BITS, NB>(pg, xp, K, g, gs, dots);
            const __m256 s = _mm256_set1_ps(bf16f(sc[g]));
            const float bb = bf16f(bi[g]);
            for (int b = 0; b < NB; ++b) {
                acc[b] = _mm256_fmadd_ps(s, dots[b], acc[b]);
                bsum[b] += bb * xs[b][g];
            }
        }
        for (int b = 0; b < NB; ++b) y[b][r] = hsum(acc[b]) + bsum[b];
    }
}

template <int BITS>
void q_gemv_multi_n(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int gs,
                    const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0, int64_t r1) {
    // pairs: with 16 ymm registers, 3–4 inputs at once spill (measured on the 0.6B 8-bit step of 4 requests: 53.0 ms
    // with 4 at once, against 24.2 ms for 2)
    for (int b = 0; b < nb; b += 2) {
        if (b + 1 < nb) q_gemv_multi_t<BITS, 2>(W, scales, biases, K, gs, xp + b, xs + b, y + b, r0, r1);
        else q_gemv_t<BITS>(W, scales, biases, K, gs, xp[b], xs[b], y[b], r0, r1);
    }
}

bool a2_q_gemv_multi(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0, int64_t r1) {
    switch (bits) {
    case 8: q_gemv_multi_n<8>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1); return true;
    case 4: q_gemv_multi_n<4>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1); return true;
    case 6: q_gemv_multi_n<6>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1); return true;
    default: return false;
    }
}

void a2_q_gemv(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
               const float* xp, const float* xs, float* y, int64_t r0, int64_t r1) {
    switch (bits) {
    case 8: q_gemv_t<8>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    case 4: q_gemv_t<4>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    case 6: q_gemv_t<6>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    default: portable_kernels().q_gemv(W, scales, biases, K, bits, gs, xp, xs, y, r0, r1);
    }
}

inline __m256 bf16x8(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
}

void a2_bf16_gemv(const uint16_t* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* w = W + r * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(w + k) + kPrefetch, _MM_HINT_T0);
            a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(bf16x8(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
            a2 = _mm256_fmadd_ps(bf16x8(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
            a3 = _mm256_fmadd_ps(bf16x8(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
        }
        for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(bf16x8(w + k), _mm256_loadu_ps(x + k), a0);
        float acc = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; k < K; ++k) acc += bf16f(w[k]) * x[k];
        y[r] = acc;
    }
}

template <int NB>
void bf16_gemv_multi_t(const uint16_t* W, int64_t K, const float* const* x, float* const* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* w = W + r * K;
        __m256 a0[NB], a1[NB], a2[NB], a3[NB];
        for (int b = 0; b < NB; ++b) a0[b] = a1[b] = a2[b] = a3[b] = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(w + k) + kPrefetch, _MM_HINT_T0);
            const __m256 w0 = bf16x8(w + k), w1 = bf16x8(w + k + 8), w2 = bf16x8(w + k + 16), w3 = bf16x8(w + k + 24);
            for (int b = 0; b < NB; ++b) {
                a0[b] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[b] + k), a0[b]);
                a1[b] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[b] + k + 8), a1[b]);
                a2[b] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x[b] + k + 16), a2[b]);
                a3[b] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x[b] + k + 24), a3[b]);
            }
        }
        for (; k + 8 <= K; k += 8) {
            const __m256 w0 = bf16x8(w + k);
            for (int b = 0; b < NB; ++b) a0[b] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[b] + k), a0[b]);
        }
        for (int b = 0; b < NB; ++b) {
            float acc = hsum(_mm256_add_ps(_mm256_add_ps(a0[b], a1[b]), _mm256_add_ps(a2[b], a3[b])));
            for (int64_t j = k; j < K; ++j) acc += bf16f(w[j]) * x[b][j];
            y[b][r] = acc;
        }
    }
}

void a2_bf16_gemv_multi(const uint16_t* W, int64_t K, const float* const* x, int nb, float* const* y, int64_t r0,
                        int64_t r1) {
    for (int b = 0; b < nb; b += 2) { // pairs: 4 accumulators per input, 16 ymm registers
        if (b + 1 < nb) bf16_gemv_multi_t<2>(W, K, x + b, y + b, r0, r1);
        else a2_bf16_gemv(W, K, x[b], y[b], r0, r1);
    }
}

void a2_f32_gemv(const float* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* w = W + r * K;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        int64_t k = 0;
        for (; k + 32 <= K; k += 32) {
            _mm_prefetch(reinterpret_cast<const char*>(w + k) + kPrefetch, _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(w + k) + kPrefetch + 64, _MM_HINT_T0);
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 16), _mm256_loadu_ps(x + k + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k + 24), _mm256_loadu_ps(x + k + 24), a3);
        }
        for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), a0);
        float acc = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
        for (; k < K; ++k) acc += w[k] * x[k];
        y[r] = acc;
    }
}

float a2_dot(const float* a, const float* b, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), a0);
    float acc = hsum(_mm256_add_ps(a0, a1));
    for (; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

void a2_axpy(float a, const float* x, float* y, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

float a2_sum(const float* x, int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetch, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(x + i) + kPrefetch + 64, _MM_HINT_T0);
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(x + i + 16));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(x + i + 24));
    }
    float acc = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) acc += x[i];
    return acc;
}

double a2_sum_exp(const float* x, int64_t n, float m) { return portable_kernels().sum_exp(x, n, m); }
void a2_softmax(float* x, int64_t n) { portable_kernels().softmax(x, n); }

// The erf of a5_gelu_erf on 8 lanes (the index is clamped to 31 first, NaN too). Each lane's interval record (8
// coefficients, 32 bytes) is loaded whole and the 8 records transposed into one vector per coefficient: 8 loads and
// 24 shuffles where 9 gathers took ~18 cycles an element on Zen 2. The centre, (i + ½)/8 (0 for interval 0), is
// exact in float and computed; the same values and operations as before, so the same results bit for bit.
void a2_gelu_erf(float* x, size_t n) {
    const ErfTable& T = erf_table();
    const __m256 rs2 = _mm256_set1_ps(float(M_SQRT1_2)), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
    const __m256 eight = _mm256_set1_ps(8.0f), last = _mm256_set1_ps(31.0f), four = _mm256_set1_ps(4.0f);
    const __m256 sign = _mm256_set1_ps(-0.0f), eighth = _mm256_set1_ps(0.125f);
    auto gelu = [&](__m256 v) {
        const __m256 z = _mm256_mul_ps(v, rs2);
        const __m256 az = _mm256_andnot_ps(sign, z);
        const __m256i idx = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_mul_ps(az, eight), last));
        alignas(32) int id[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(id), idx);
        __m256 c[8];
        for (int l = 0; l < 8; ++l) c[l] = _mm256_load_ps(T.rec[id[l]]);
        transpose8x8(c); // c[j]: coefficient j of every lane
        const __m256 fi = _mm256_cvtepi32_ps(idx);
        const __m256 ctr = _mm256_and_ps(_mm256_mul_ps(_mm256_add_ps(fi, half), eighth),
                                         _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_setzero_si256())));
        const __m256 t = _mm256_sub_ps(az, ctr);
        __m256 p = c[7];
        for (int j = 6; j >= 0; --j) p = _mm256_fmadd_ps(p, t, c[j]);
        p = _mm256_blendv_ps(p, one, _mm256_cmp_ps(az, four, _CMP_GE_OQ));
        const __m256 e = _mm256_or_ps(p, _mm256_and_ps(z, sign));
        return _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e));
    };
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, gelu(_mm256_loadu_ps(x + i)));
    if (i < n) {
        alignas(32) float buf[8] = {};
        std::memcpy(buf, x + i, (n - i) * sizeof(float));
        _mm256_store_ps(buf, gelu(_mm256_load_ps(buf)));
        std::memcpy(x + i, buf, (n - i) * sizeof(float));
    }
}

const KernelTable kAvx2{Isa::Avx2,  "avx2",            a2_q_prep,           a2_q_gemv, a2_bf16_gemv,
                        a2_f32_gemv, generic_q_dequant, generic_bf16_to_f32, a2_dot,    a2_axpy,
                        generic_attn_scores<a2_dot>, generic_attn_wsum<a2_axpy>, a2_sum,
                        generic_attn_scores_bf16<a2_dot>, generic_attn_wsum_bf16<a2_axpy>, a2_sum_exp,
                        a2_softmax, a2_gelu_erf, a2_bf16_gemv_multi, a2_q_gemv_multi, avx2_gemm_rows};

} // namespace

const KernelTable* avx2_kernels() { return &kAvx2; }

} // namespace qasr::cpu
