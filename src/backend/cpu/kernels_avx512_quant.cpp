// The AVX-512 table's quantized matrix-vector products: MLX 4/6/8-bit codes fused with their dequantization —
// on AVX512-VNNI CPUs through int16 x and vpdpwssd (8- and 4-bit, 6-bit with gs % 64 == 0), else codes widened to
// float and FMA. 6-bit codes with a group size that is not a multiple of 64 use the AVX2 kernels (every AVX-512
// CPU has AVX2).
#include "backend/cpu/kernels_avx512_quant.hpp"

#include "backend/cpu/avx512_prefetch.hpp"
#include "backend/cpu/kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qasr::cpu {
namespace {

#include "backend/cpu/kernels_generic.inc"

using namespace a5;

inline __m512 u8x16_to_ps(__m128i b) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b)); }

bool use_avx2_for(int bits, int gs) { return bits == 6 && gs % 64 != 0; }

// x order: 4-bit: per 32 columns the 16 even then the 16 odd ones; 6-bit: per 64 columns, columns 4i+r for
// r = 0..3 (i < 16); 8-bit: natural.
// 8- and 4-bit codes on CPUs with AVX512-VNNI (6-bit with gs % 64 == 0 too): x is rounded per group to int16
// (scale max|x_g|/32767, relative error ≤ 1.5e-5, far below the weights' own) so that codes widened to int16 go
// through vpdpwssd: a quarter of the instructions of the float path, which makes the decode memory-bound. Layout
// in the xp buffer (K floats): int16 x[K] in its first K/2 floats, then the float group scales sx[K/gs]. Order of
// x: 4-bit, and 8-bit with gs % 64 == 0: per 64 columns the 32 even ones, then the 32 odd ones (the 8-bit kernel
// splits 64 code bytes into even and odd columns with an and and a shift; 4-bit: low and high nibbles); 6-bit:
// per 64 columns the pairs (4i, 4i+1), then the pairs (4i+2, 4i+3), i < 16 (a 3-byte group of 4 codes becomes
// two 32-bit lanes of two int16 codes each); 8-bit otherwise: natural.
bool vnni_for(int bits) {
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512vnni") != 0;
    }();
    return has && (bits == 8 || bits == 6 || bits == 4);
}
bool vnni_for(int bits, int gs) { return vnni_for(bits) && (bits == 8 || gs % 64 == 0); }

void prep_int16_scalar(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) {
    int16_t* xi = reinterpret_cast<int16_t*>(xp);
    float* sx = xp + K / 2;
    for (int64_t g = 0; g < K / gs; ++g) {
        const float* xg = x + g * gs;
        float s = 0, m = 0;
        for (int j = 0; j < gs; ++j) {
            s += xg[j];
            m = std::max(m, std::fabs(xg[j]));
        }
        xs[g] = s;
        const float sc = m > 0 ? m / 32767.0f : 1.0f, inv = 1.0f / sc;
        sx[g] = sc;
        int16_t* o = xi + g * gs;
        if (bits == 4 || (bits == 8 && gs % 64 == 0)) { // per 64 columns: the 32 even ones, then the 32 odd ones
            for (int b = 0; b < gs; b += 64)
                for (int i = 0; i < 32; ++i) {
                    o[b + i] = int16_t(std::lrint(xg[b + 2 * i] * inv));
                    o[b + 32 + i] = int16_t(std::lrint(xg[b + 2 * i + 1] * inv));
                }
        } else {
            for (int j = 0; j < gs; ++j) o[j] = int16_t(std::lrint(xg[j] * inv));
        }
    }
}

// The same values as prep_int16_scalar, vectorized (it runs on one thread before every matrix-vector product:
// ≈0.8 ms per token in scalar code). Group sums: 16 groups per vector, each lane adding its group's values in
// column order (the scalar order, so bit-identical); max|x| is order-free; rounding: vcvtps2dq in the default
// round-to-nearest-even mode, as lrint.
void prep_int16(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) {
    if (gs % 64 != 0) return prep_int16_scalar(x, K, bits, gs, xp, xs);
    int16_t* xi = reinterpret_cast<int16_t*>(xp);
    float* sx = xp + K / 2;
    const int64_t ng = K / gs;
    const __m512i lane_off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(gs));
    for (int64_t g0 = 0; g0 < ng; g0 += 16) {
        const int64_t cnt = std::min<int64_t>(16, ng - g0);
        const __mmask16 mk = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1u);
        const float* base = x + g0 * gs;
        __m512 sum = _mm512_setzero_ps();
        for (int j = 0; j < gs; ++j)
            sum = _mm512_add_ps(sum, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk, lane_off, base + j, 4));
        _mm512_mask_storeu_ps(xs + g0, mk, sum);
    }
    const __m512i even = _mm512_setr_epi32(0x00020000, 0x00060004, 0x000a0008, 0x000e000c, 0x00120010, 0x00160014,
                                           0x001a0018, 0x001e001c, 0x00220020, 0x00260024, 0x002a0028, 0x002e002c,
                                           0x00320030, 0x00360034, 0x003a0038, 0x003e003c);
    const __m512i odd = _mm512_add_epi16(even, _mm512_set1_epi16(1));
    // 6-bit: output lane k takes column 4·(k/2) + k%2 (pairs 01), or that + 2 (pairs 23)
    const __m512i pairs01 = _mm512_setr_epi32(0x00010000, 0x00050004, 0x00090008, 0x000d000c, 0x00110010, 0x00150014,
                                              0x00190018, 0x001d001c, 0x00210020, 0x00250024, 0x00290028, 0x002d002c,
                                              0x00310030, 0x00350034, 0x00390038, 0x003d003c);
    const __m512i pairs23 = _mm512_add_epi16(pairs01, _mm512_set1_epi16(2));
    for (int64_t g = 0; g < ng; ++g) {
        const float* xg = x + g * gs;
        __m512 mx = _mm512_setzero_ps();
        for (int j = 0; j < gs; j += 16) mx = _mm512_max_ps(mx, _mm512_abs_ps(_mm512_loadu_ps(xg + j)));
        const float m = _mm512_reduce_max_ps(mx);
        const float sc = m > 0 ? m / 32767.0f : 1.0f, inv = 1.0f / sc;
        sx[g] = sc;
        const __m512 vi = _mm512_set1_ps(inv);
        int16_t* o = xi + g * gs;
        auto q16 = [&](const float* p) { // 32 columns → 32 int16
            const __m256i lo = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p), vi)));
            const __m256i hi = _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p + 16), vi)));
            return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        };
        for (int b = 0; b < gs; b += 64) {
            const __m512i c0 = q16(xg + b), c1 = q16(xg + b + 32); // columns b … b+31, b+32 … b+63
            if (bits == 4 || bits == 8) { // the 32 even columns, then the 32 odd ones (gs % 64 == 0 here)
                _mm512_storeu_si512(o + b, _mm512_permutex2var_epi16(c0, even, c1));
                _mm512_storeu_si512(o + b + 32, _mm512_permutex2var_epi16(c0, odd, c1));
            } else if (bits == 6) {
                _mm512_storeu_si512(o + b, _mm512_permutex2var_epi16(c0, pairs01, c1));
                _mm512_storeu_si512(o + b + 32, _mm512_permutex2var_epi16(c0, pairs23, c1));
            } else {
                _mm512_storeu_si512(o + b, c0);
                _mm512_storeu_si512(o + b + 32, c1);
            }
        }
    }
}

void a5_q_prep(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) {
    if (use_avx2_for(bits, gs)) return avx2_kernels()->q_prep(x, K, bits, gs, xp, xs);
    if (vnni_for(bits, gs)) return prep_int16(x, K, bits, gs, xp, xs);
    group_sums(x, K, gs, xs);
    float_path_order(x, K, bits, 64, xp);
}

template <int BITS> inline __m512 group_dot(const uint8_t* p, const float* xp, int gs) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    if constexpr (BITS == 8) {
        for (int j = 0; j < gs; j += 32) {
            a0 = _mm512_fmadd_ps(u8x16_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j))),
                                 _mm512_loadu_ps(xp + j), a0);
            a1 = _mm512_fmadd_ps(u8x16_to_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j + 16))),
                                 _mm512_loadu_ps(xp + j + 16), a1);
        }
    } else if constexpr (BITS == 4) {
        const __m128i m4 = _mm_set1_epi8(15);
        for (int j = 0; j < gs; j += 32) {
            const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + j / 2));
            a0 = _mm512_fmadd_ps(u8x16_to_ps(_mm_and_si128(b, m4)), _mm512_loadu_ps(xp + j), a0);
            a1 = _mm512_fmadd_ps(u8x16_to_ps(_mm_and_si128(_mm_srli_epi16(b, 4), m4)), _mm512_loadu_ps(xp + j + 16),
                                 a1);
        }
    } else { // 6, gs % 64 == 0
        const __m512i shuf = _mm512_set_epi8(                                                       //
            -1, 15, 14, 13, -1, 12, 11, 10, -1, 9, 8, 7, -1, 6, 5, 4,                               // lane 3
            -1, 11, 10, 9, -1, 8, 7, 6, -1, 5, 4, 3, -1, 2, 1, 0,                                   // lane 2
            -1, 15, 14, 13, -1, 12, 11, 10, -1, 9, 8, 7, -1, 6, 5, 4,                               // lane 1
            -1, 11, 10, 9, -1, 8, 7, 6, -1, 5, 4, 3, -1, 2, 1, 0);                                  // lane 0
        const __m512i m6 = _mm512_set1_epi32(63);
        for (int j = 0; j < gs; j += 64) {
            const uint8_t* q = p + j / 4 * 3;
            __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8)), 1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 24)), 2);
            v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32)), 3);
            const __m512i d = _mm512_shuffle_epi8(v, shuf);
            const float* x = xp + j;
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(d, m6)), _mm512_loadu_ps(x), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d, 6), m6)),
                                 _mm512_loadu_ps(x + 16), a1);
            a0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(d, 12), m6)),
                                 _mm512_loadu_ps(x + 32), a0);
            a1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(d, 18)), _mm512_loadu_ps(x + 48), a1);
        }
    }
    return _mm512_add_ps(a0, a1);
}

template <int BITS>
void q_gemv_t(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int gs, const float* xp,
              const float* xs, float* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * BITS / 8, gbytes = int64_t(gs) * BITS / 8;
    // (two rows at a time, as two independent streams, measured no faster: benchmarks.md, session 5)
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m512 acc = _mm512_setzero_ps();
        float bsum = 0;
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* pg = row + g * gbytes;
            for (int64_t o = 0; o < gbytes; o += 64) prefetch_far(pg + o);
            acc = _mm512_fmadd_ps(_mm512_set1_ps(bf16f(sc[g])), group_dot<BITS>(pg, xp + g * gs, gs), acc);
            bsum += bf16f(bi[g]) * xs[g];
        }
        y[r] = _mm512_reduce_add_ps(acc) + bsum;
    }
}

// 8-bit codes, gs % 64 == 0, x in the even/odd order: each 64 code bytes are one load, split into the even
// columns (and 0x00ff per word) and the odd ones (shift right by 8), no byte-to-word widening shuffles (port 5);
// the rows' bf16 scales · x scales and the bias dot product are done 16 groups at a time in vectors instead of
// scalar per group. Fewer uops per byte than q_gemv_vnni<8> (hot in L2 ≈27 against ≈23 GB/s per thread), which
// leaves the loads more room to overlap the memory stream.
inline __m512 bf16_lanes(const uint16_t* p, __mmask16 m) { // up to 16 bf16 values widened exactly, 0 past m
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
__attribute__((target("avx512vnni"))) void q_gemv_vnni8_split(const uint8_t* W, const uint16_t* scales,
                                                              const uint16_t* biases, int64_t K, int gs,
                                                              const float* xp, const float* xs, float* y, int64_t r0,
                                                              int64_t r1) {
    const int64_t ng = K / gs;
    const int16_t* xi = reinterpret_cast<const int16_t*>(xp);
    const float* sx = xp + K / 2;
    const __m512i lo8 = _mm512_set1_epi16(0x00ff);
    alignas(64) float ss[16];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * K;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m512 acc = _mm512_setzero_ps(), bacc = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += 16) {
            const int64_t cnt = std::min<int64_t>(16, ng - g0);
            const __mmask16 mk = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1u);
            _mm512_store_ps(ss, _mm512_mul_ps(bf16_lanes(sc + g0, mk), _mm512_maskz_loadu_ps(mk, sx + g0)));
            bacc = _mm512_fmadd_ps(bf16_lanes(bi + g0, mk), _mm512_maskz_loadu_ps(mk, xs + g0), bacc);
            for (int64_t g = g0; g < g0 + cnt; ++g) {
                const uint8_t* pg = row + g * gs;
                const int16_t* xg = xi + g * gs;
                __m512i d = _mm512_setzero_si512();
                for (int j = 0; j < gs; j += 64) {
                    prefetch_far(pg + j);
                    const __m512i w = _mm512_loadu_si512(pg + j);
                    d = _mm512_dpwssd_epi32(d, _mm512_and_si512(w, lo8), _mm512_loadu_si512(xg + j));
                    d = _mm512_dpwssd_epi32(d, _mm512_srli_epi16(w, 8), _mm512_loadu_si512(xg + j + 32));
                }
                acc = _mm512_fmadd_ps(_mm512_set1_ps(ss[g - g0]), _mm512_cvtepi32_ps(d), acc);
            }
        }
        y[r] = _mm512_reduce_add_ps(acc) + _mm512_reduce_add_ps(bacc);
    }
}

// The 64 6-bit codes at q (48 bytes) as two vectors of 16 int32 lanes, each lane two int16 codes: lane i of c01
// holds codes 4i (low half) and 4i+1, of c23 codes 4i+2 and 4i+3 — for vpdpwssd with x in the 6-bit pair order.
// Each 3-byte group t = c0 | c1 << 6 | c2 << 12 | c3 << 18 is spread to a lane by one byte shuffle.
inline void widen6_pairs(const uint8_t* q, __m512i& c01, __m512i& c23) {
    const __m512i shuf = _mm512_set_epi8(                                                       //
        -1, 15, 14, 13, -1, 12, 11, 10, -1, 9, 8, 7, -1, 6, 5, 4,                               // lane 3
        -1, 11, 10, 9, -1, 8, 7, 6, -1, 5, 4, 3, -1, 2, 1, 0,                                   // lane 2
        -1, 15, 14, 13, -1, 12, 11, 10, -1, 9, 8, 7, -1, 6, 5, 4,                               // lane 1
        -1, 11, 10, 9, -1, 8, 7, 6, -1, 5, 4, 3, -1, 2, 1, 0);                                  // lane 0
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 24)), 2);
    v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 32)), 3);
    const __m512i t = _mm512_shuffle_epi8(v, shuf);
    const __m512i lo6 = _mm512_set1_epi32(63), hi6 = _mm512_set1_epi32(63 << 16);
    // (a & b) | c: ternary-logic immediate 0xEA
    c01 = _mm512_ternarylogic_epi32(_mm512_slli_epi32(t, 10), hi6, _mm512_and_si512(t, lo6), 0xEA);
    c23 = _mm512_ternarylogic_epi32(_mm512_srli_epi32(t, 2), hi6, _mm512_and_si512(_mm512_srli_epi32(t, 12), lo6), 0xEA);
}

template <int BITS>
__attribute__((target("avx512vnni"))) void q_gemv_vnni(const uint8_t* W, const uint16_t* scales,
                                                       const uint16_t* biases, int64_t K, int gs, const float* xp,
                                                       const float* xs, float* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * BITS / 8, gbytes = int64_t(gs) * BITS / 8;
    const int16_t* xi = reinterpret_cast<const int16_t*>(xp);
    const float* sx = xp + K / 2;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m512 acc = _mm512_setzero_ps();
        float bsum = 0;
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* pg = row + g * gbytes;
            for (int64_t o = 0; o < gbytes; o += 64) prefetch_far(pg + o);
            const int16_t* xg = xi + g * gs;
            __m512i d = _mm512_setzero_si512();
            if constexpr (BITS == 8) {
                for (int j = 0; j < gs; j += 32)
                    d = _mm512_dpwssd_epi32(
                        d, _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg + j))),
                        _mm512_loadu_si512(xg + j));
            } else if constexpr (BITS == 6) { // 64 columns = 48 bytes (gs % 64 == 0)
                for (int j = 0; j < gs; j += 64) {
                    __m512i c01, c23;
                    widen6_pairs(pg + j / 4 * 3, c01, c23);
                    d = _mm512_dpwssd_epi32(d, c01, _mm512_loadu_si512(xg + j));
                    d = _mm512_dpwssd_epi32(d, c23, _mm512_loadu_si512(xg + j + 32));
                }
            } else { // 64 columns = 32 bytes: low nibbles are the even columns, high nibbles the odd ones
                for (int j = 0; j < gs; j += 64) {
                    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg + j / 2));
                    const __m256i lo = _mm256_and_si256(b, m4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
                    d = _mm512_dpwssd_epi32(d, _mm512_cvtepu8_epi16(lo), _mm512_loadu_si512(xg + j));
                    d = _mm512_dpwssd_epi32(d, _mm512_cvtepu8_epi16(hi), _mm512_loadu_si512(xg + j + 32));
                }
            }
            acc = _mm512_fmadd_ps(_mm512_set1_ps(bf16f(sc[g]) * sx[g]), _mm512_cvtepi32_ps(d), acc);
            bsum += bf16f(bi[g]) * xs[g];
        }
        y[r] = _mm512_reduce_add_ps(acc) + bsum;
    }
}

// q_gemv_vnni8_split for NB inputs: each 64 code bytes loaded and split once, then the same integer dot products
// (exact) and the same float chain per input.
template <int NB>
__attribute__((target("avx512vnni"))) void q_gemv_vnni8_split_multi(const uint8_t* W, const uint16_t* scales,
                                                                    const uint16_t* biases, int64_t K, int gs,
                                                                    const float* const* xp, const float* const* xs,
                                                                    float* const* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs;
    const __m512i lo8 = _mm512_set1_epi16(0x00ff);
    alignas(64) float ss[NB][16];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * K;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m512 acc[NB], bacc[NB];
        for (int b = 0; b < NB; ++b) acc[b] = bacc[b] = _mm512_setzero_ps();
        for (int64_t g0 = 0; g0 < ng; g0 += 16) {
            const int64_t cnt = std::min<int64_t>(16, ng - g0);
            const __mmask16 mk = cnt == 16 ? __mmask16(0xffff) : __mmask16((1u << cnt) - 1u);
            const __m512 scv = bf16_lanes(sc + g0, mk), biv = bf16_lanes(bi + g0, mk);
            for (int b = 0; b < NB; ++b) {
                const float* sx = xp[b] + K / 2;
                _mm512_store_ps(ss[b], _mm512_mul_ps(scv, _mm512_maskz_loadu_ps(mk, sx + g0)));
                bacc[b] = _mm512_fmadd_ps(biv, _mm512_maskz_loadu_ps(mk, xs[b] + g0), bacc[b]);
            }
            for (int64_t g = g0; g < g0 + cnt; ++g) {
                const uint8_t* pg = row + g * gs;
                __m512i d[NB];
                for (int b = 0; b < NB; ++b) d[b] = _mm512_setzero_si512();
                for (int j = 0; j < gs; j += 64) {
                    prefetch_far(pg + j);
                    const __m512i w = _mm512_loadu_si512(pg + j);
                    const __m512i we = _mm512_and_si512(w, lo8), wo = _mm512_srli_epi16(w, 8);
                    for (int b = 0; b < NB; ++b) {
                        const int16_t* xg = reinterpret_cast<const int16_t*>(xp[b]) + g * gs;
                        d[b] = _mm512_dpwssd_epi32(d[b], we, _mm512_loadu_si512(xg + j));
                        d[b] = _mm512_dpwssd_epi32(d[b], wo, _mm512_loadu_si512(xg + j + 32));
                    }
                }
                for (int b = 0; b < NB; ++b)
                    acc[b] = _mm512_fmadd_ps(_mm512_set1_ps(ss[b][g - g0]), _mm512_cvtepi32_ps(d[b]), acc[b]);
            }
        }
        for (int b = 0; b < NB; ++b) y[b][r] = _mm512_reduce_add_ps(acc[b]) + _mm512_reduce_add_ps(bacc[b]);
    }
}

// q_gemv_vnni<BITS> for NB inputs: each group's codes loaded and widened once, the same integer dot products and
// float/scalar chains per input.
template <int BITS, int NB>
__attribute__((target("avx512vnni"))) void q_gemv_vnni_multi(const uint8_t* W, const uint16_t* scales,
                                                             const uint16_t* biases, int64_t K, int gs,
                                                             const float* const* xp, const float* const* xs,
                                                             float* const* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * BITS / 8, gbytes = int64_t(gs) * BITS / 8;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        const uint16_t* sc = scales + r * ng;
        const uint16_t* bi = biases + r * ng;
        __m512 acc[NB];
        float bsum[NB];
        for (int b = 0; b < NB; ++b) acc[b] = _mm512_setzero_ps(), bsum[b] = 0;
        for (int64_t g = 0; g < ng; ++g) {
            const uint8_t* pg = row + g * gbytes;
            for (int64_t o = 0; o < gbytes; o += 64) prefetch_far(pg + o);
            __m512i d[NB];
            for (int b = 0; b < NB; ++b) d[b] = _mm512_setzero_si512();
            if constexpr (BITS == 8) {
                for (int j = 0; j < gs; j += 32) {
                    const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg + j)));
                    for (int b = 0; b < NB; ++b)
                        d[b] = _mm512_dpwssd_epi32(
                            d[b], w, _mm512_loadu_si512(reinterpret_cast<const int16_t*>(xp[b]) + g * gs + j));
                }
            } else if constexpr (BITS == 6) {
                for (int j = 0; j < gs; j += 64) {
                    __m512i c01, c23;
                    widen6_pairs(pg + j / 4 * 3, c01, c23);
                    for (int b = 0; b < NB; ++b) {
                        const int16_t* xg = reinterpret_cast<const int16_t*>(xp[b]) + g * gs;
                        d[b] = _mm512_dpwssd_epi32(d[b], c01, _mm512_loadu_si512(xg + j));
                        d[b] = _mm512_dpwssd_epi32(d[b], c23, _mm512_loadu_si512(xg + j + 32));
                    }
                }
            } else {
                for (int j = 0; j < gs; j += 64) {
                    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pg + j / 2));
                    const __m512i lo = _mm512_cvtepu8_epi16(_mm256_and_si256(bytes, m4));
                    const __m512i hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4));
                    for (int b = 0; b < NB; ++b) {
                        const int16_t* xg = reinterpret_cast<const int16_t*>(xp[b]) + g * gs;
                        d[b] = _mm512_dpwssd_epi32(d[b], lo, _mm512_loadu_si512(xg + j));
                        d[b] = _mm512_dpwssd_epi32(d[b], hi, _mm512_loadu_si512(xg + j + 32));
                    }
                }
            }
            const float s = bf16f(sc[g]), bb = bf16f(bi[g]);
            for (int b = 0; b < NB; ++b) {
                acc[b] = _mm512_fmadd_ps(_mm512_set1_ps(s * (xp[b] + K / 2)[g]), _mm512_cvtepi32_ps(d[b]), acc[b]);
                bsum[b] += bb * xs[b][g];
            }
        }
        for (int b = 0; b < NB; ++b) y[b][r] = _mm512_reduce_add_ps(acc[b]) + bsum[b];
    }
}

template <int BITS>
void q_gemv_vnni_multi_n(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int gs,
                         const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0,
                         int64_t r1) {
    switch (nb) {
    case 1: return q_gemv_vnni<BITS>(W, scales, biases, K, gs, xp[0], xs[0], y[0], r0, r1);
    case 2: return q_gemv_vnni_multi<BITS, 2>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
    case 3: return q_gemv_vnni_multi<BITS, 3>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
    default: return q_gemv_vnni_multi<BITS, 4>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
    }
}

bool a5_q_gemv_multi(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0, int64_t r1) {
    // where a5_q_gemv takes a VNNI kernel, the same kernel's multi-input form
    if (use_avx2_for(bits, gs) || !vnni_for(bits, gs)) return false;
    if (bits == 8 && gs % 64 != 0) {
        q_gemv_vnni_multi_n<8>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1);
        return true;
    }
    if (bits == 4) {
        q_gemv_vnni_multi_n<4>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1);
        return true;
    }
    if (bits == 6) {
        q_gemv_vnni_multi_n<6>(W, scales, biases, K, gs, xp, xs, nb, y, r0, r1);
        return true;
    }
    switch (nb) {
    case 1: q_gemv_vnni8_split(W, scales, biases, K, gs, xp[0], xs[0], y[0], r0, r1); break;
    case 2: q_gemv_vnni8_split_multi<2>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    case 3: q_gemv_vnni8_split_multi<3>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    default: q_gemv_vnni8_split_multi<4>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    }
    return true;
}

void a5_q_gemv(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
               const float* xp, const float* xs, float* y, int64_t r0, int64_t r1) {
    if (use_avx2_for(bits, gs)) return avx2_kernels()->q_gemv(W, scales, biases, K, bits, gs, xp, xs, y, r0, r1);
    if (vnni_for(bits, gs)) {
        if (bits == 8 && gs % 64 == 0) return q_gemv_vnni8_split(W, scales, biases, K, gs, xp, xs, y, r0, r1);
        if (bits == 8) return q_gemv_vnni<8>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
        if (bits == 6) return q_gemv_vnni<6>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
        return q_gemv_vnni<4>(W, scales, biases, K, gs, xp, xs, y, r0, r1);
    }
    switch (bits) {
    case 8: q_gemv_t<8>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    case 4: q_gemv_t<4>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    case 6: q_gemv_t<6>(W, scales, biases, K, gs, xp, xs, y, r0, r1); break;
    default: portable_kernels().q_gemv(W, scales, biases, K, bits, gs, xp, xs, y, r0, r1);
    }
}

} // namespace

namespace a5 {
void q_prep(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) { a5_q_prep(x, K, bits, gs, xp, xs); }
void q_gemv(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
            const float* xp, const float* xs, float* y, int64_t r0, int64_t r1) {
    a5_q_gemv(W, scales, biases, K, bits, gs, xp, xs, y, r0, r1);
}
bool q_gemv_multi(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                  const float* const* xp, const float* const* xs, int nb, float* const* y, int64_t r0, int64_t r1) {
    return a5_q_gemv_multi(W, scales, biases, K, bits, gs, xp, xs, nb, y, r0, r1);
}
} // namespace a5

} // namespace qasr::cpu
