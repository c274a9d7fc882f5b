// AVX-512 / AMX kernels of the multi-row decoder pass (compiled with the AMX flags; see prefill_avx512.hpp).
//
// Attention tile roles: S = Q·Kᵀ takes the queries as A tiles (16 rows × 32 dims, straight from a bf16 copy of
// q) and the keys as B tiles in the VNNI pair layout (row p: dims 2p, 2p+1 of 16 keys), made once per KV head by
// a 16 × 16 transpose of 32-bit pairs; O = P·V takes the probabilities as A tiles and the values as B tiles (row
// p: keys 2p, 2p+1 interleaved over 16 dims). Both the queries and the probabilities are split into hi + lo bf16
// terms (x ≈ hi + lo to ≈16 bits), each multiplied into the same float32 accumulator, so the result stays close to
// the float32 sgemm path (k and v are bf16 in the cache already) at twice the tile products, still a fraction of
// sgemm's time.
#include "backend/cpu/prefill_avx512.hpp"

#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/exp_avx512.hpp"
#include "backend/cpu/transpose16.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

namespace qasr::cpu {
namespace {

struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
};
template <typename T> std::unique_ptr<T[], FreeDeleter> aligned_array(int64_t n) {
    const size_t bytes = (size_t(n) * sizeof(T) + 63) / 64 * 64;
    return std::unique_ptr<T[], FreeDeleter>(static_cast<T*>(std::aligned_alloc(64, std::max<size_t>(bytes, 64))));
}

inline __m512 widen_lo(__m512i b) { // bf16 values 0..15 of b → float32
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(b)), 16));
}
inline __m512 widen_hi(__m512i b) { // bf16 values 16..31 of b → float32
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(b, 1)), 16));
}

// 32 floats (x0: 0..15, x1: 16..31) → hi = bf16(x), lo = bf16(x − hi), both nearest even.
inline void split32(__m512 x0, __m512 x1, uint16_t* hi, uint16_t* lo) {
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
    const __m512i l = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(x1, widen_hi(h)), _mm512_sub_ps(x0, widen_lo(h)));
    _mm512_store_si512(hi, h);
    _mm512_store_si512(lo, l);
}

// Keys [0, Lp) of one head (rows of hd bf16, zero at and past `total`) → B tiles: tile (kb, dc) at
// out + (kb·DC + dc)·512, row p = pair p of dims [32dc, 32dc + 32) for keys 16kb..16kb+15.
void pack_keys(const uint16_t* k, int64_t total, int64_t Lp, int64_t hd, uint16_t* out) {
    const int64_t DC = hd / 32;
    for (int64_t kb = 0; kb < Lp / 16; ++kb)
        for (int64_t dc = 0; dc < DC; ++dc) {
            __m512 r[16];
            for (int i = 0; i < 16; ++i) {
                const int64_t key = kb * 16 + i;
                r[i] =
                    key < total ? _mm512_castsi512_ps(_mm512_loadu_si512(k + key * hd + dc * 32)) : _mm512_setzero_ps();
            }
            transpose16x16(r);
            uint16_t* t = out + (kb * DC + dc) * 512;
            for (int p = 0; p < 16; ++p)
                _mm512_store_si512(t + p * 32, _mm512_castps_si512(r[p]));
        }
}

// Values [0, Lp) of one head → key pairs: row p at out + p·2hd holds (v[2p][d], v[2p+1][d]) for d < hd.
void pack_values(const uint16_t* v, int64_t total, int64_t Lp, int64_t hd, uint16_t* out) {
    alignas(64) static constexpr uint16_t lo_idx[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                        8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
    const __m512i ilo = _mm512_load_si512(lo_idx), ihi = _mm512_add_epi16(ilo, _mm512_set1_epi16(16));
    for (int64_t p = 0; p < Lp / 2; ++p) {
        const uint16_t* a = v + 2 * p * hd;
        const bool va = 2 * p < total, vb = 2 * p + 1 < total;
        for (int64_t d = 0; d < hd; d += 32) {
            const __m512i x = va ? _mm512_loadu_si512(a + d) : _mm512_setzero_si512();
            const __m512i y = vb ? _mm512_loadu_si512(a + hd + d) : _mm512_setzero_si512();
            _mm512_store_si512(out + p * 2 * hd + 2 * d, _mm512_permutex2var_epi16(x, ilo, y));
            _mm512_store_si512(out + p * 2 * hd + 2 * d + 32, _mm512_permutex2var_epi16(x, ihi, y));
        }
    }
}

} // namespace

void amx_causal_attention(const float* q, const uint16_t* k, const uint16_t* v, int64_t head_stride, float* o,
                          int64_t n, int64_t past, int64_t Hq, int64_t Hkv, int64_t hd,
                          void (*softmax)(float*, int64_t)) {
    const int64_t group = Hq / Hkv, Dq = Hq * hd, total = past + n, Lp = (total + 63) / 64 * 64, DC = hd / 32;
    const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel
    {
        amx_load_tile_config();
        auto kp = aligned_array<uint16_t>(Lp * hd), vp = aligned_array<uint16_t>(Lp * hd);
        auto qh = aligned_array<uint16_t>(16 * hd), ql = aligned_array<uint16_t>(16 * hd);
        auto s = aligned_array<float>(16 * Lp), ob = aligned_array<float>(16 * hd);
        auto ph = aligned_array<uint16_t>(16 * Lp), pl = aligned_array<uint16_t>(16 * Lp);
        // one KV head per unit with the query heads sharing it (packed once for them); with more threads than KV
        // heads one query head per unit, each packing its KV head itself
        const int64_t per = omp_get_num_threads() <= Hkv ? group : 1;
#pragma omp for schedule(static)
        for (int64_t u = 0; u < Hq / per; ++u) {
            const int64_t h0 = u * per, c = h0 / group;
            pack_keys(k + c * head_stride, total, Lp, hd, kp.get());
            pack_values(v + c * head_stride, total, Lp, hd, vp.get());
            for (int64_t h = h0; h < h0 + per; ++h)
                for (int64_t i0 = 0; i0 < n; i0 += 16) {
                    const int64_t rows = std::min<int64_t>(16, n - i0);
                    for (int64_t r = 0; r < 16; ++r)
                        for (int64_t d = 0; d < hd; d += 32) {
                            const float* x = q + (i0 + r) * Dq + h * hd + d;
                            const __m512 x0 = r < rows ? _mm512_loadu_ps(x) : _mm512_setzero_ps();
                            const __m512 x1 = r < rows ? _mm512_loadu_ps(x + 16) : _mm512_setzero_ps();
                            split32(x0, x1, qh.get() + r * hd + d, ql.get() + r * hd + d);
                        }
                    // S over the keys the block's last row sees, 64 at a time (4 C tiles)
                    const int64_t seen = past + i0 + rows;
                    for (int64_t g = 0; g < (seen + 63) / 64; ++g) {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                        const uint16_t* kt = kp.get() + 4 * g * DC * 512;
                        for (int64_t dc = 0; dc < DC; ++dc) {
                            _tile_loadd(4, qh.get() + dc * 32, int(hd * 2));
                            _tile_loadd(5, ql.get() + dc * 32, int(hd * 2));
                            _tile_loadd(6, kt + dc * 512, 64);
                            _tile_dpbf16ps(0, 4, 6);
                            _tile_dpbf16ps(0, 5, 6);
                            _tile_loadd(7, kt + (DC + dc) * 512, 64);
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(1, 5, 7);
                            _tile_loadd(6, kt + (2 * DC + dc) * 512, 64);
                            _tile_dpbf16ps(2, 4, 6);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_loadd(7, kt + (3 * DC + dc) * 512, 64);
                            _tile_dpbf16ps(3, 4, 7);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                        float* sg = s.get() + g * 64;
                        _tile_stored(0, sg, int(Lp * 4));
                        _tile_stored(1, sg + 16, int(Lp * 4));
                        _tile_stored(2, sg + 32, int(Lp * 4));
                        _tile_stored(3, sg + 48, int(Lp * 4));
                    }
                    // scale, softmax over the visible keys, P = hi + lo with zeros up to the 32-key chunk end
                    const int64_t nkc = (seen + 31) / 32;
                    const __m512 vs = _mm512_set1_ps(scale);
                    for (int64_t r = 0; r < 16; ++r) {
                        float* row = s.get() + r * Lp;
                        const int64_t len = r < rows ? past + i0 + r + 1 : 1;
                        for (int64_t j = 0; j < len; j += 16) {
                            const __mmask16 m = len - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (len - j)) - 1u);
                            _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), vs));
                        }
                        softmax(row, len);
                        for (int64_t j = 0; j < nkc * 32; j += 32) {
                            const int64_t a = std::clamp<int64_t>(len - j, 0, 16),
                                          b = std::clamp<int64_t>(len - j - 16, 0, 16);
                            const __m512 x0 = _mm512_maskz_loadu_ps(__mmask16((1u << a) - 1u), row + j);
                            const __m512 x1 = _mm512_maskz_loadu_ps(__mmask16((1u << b) - 1u), row + j + 16);
                            split32(x0, x1, ph.get() + r * Lp + j, pl.get() + r * Lp + j);
                        }
                    }
                    // O = P·V, 64 dims (4 C tiles) at a time
                    for (int64_t d0 = 0; d0 < hd; d0 += 64) {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                        for (int64_t kc = 0; kc < nkc; ++kc) {
                            _tile_loadd(4, ph.get() + kc * 32, int(Lp * 2));
                            _tile_loadd(5, pl.get() + kc * 32, int(Lp * 2));
                            const uint16_t* vt = vp.get() + kc * 32 * hd + 2 * d0;
                            _tile_loadd(6, vt, int(hd * 4));
                            _tile_dpbf16ps(0, 4, 6);
                            _tile_dpbf16ps(0, 5, 6);
                            _tile_loadd(7, vt + 32, int(hd * 4));
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(1, 5, 7);
                            _tile_loadd(6, vt + 64, int(hd * 4));
                            _tile_dpbf16ps(2, 4, 6);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_loadd(7, vt + 96, int(hd * 4));
                            _tile_dpbf16ps(3, 4, 7);
                            _tile_dpbf16ps(3, 5, 7);
                        }
                        _tile_stored(0, ob.get() + d0, int(hd * 4));
                        _tile_stored(1, ob.get() + d0 + 16, int(hd * 4));
                        _tile_stored(2, ob.get() + d0 + 32, int(hd * 4));
                        _tile_stored(3, ob.get() + d0 + 48, int(hd * 4));
                    }
                    for (int64_t r = 0; r < rows; ++r)
                        std::memcpy(o + (i0 + r) * Dq + h * hd, ob.get() + r * hd, size_t(hd) * 4);
                }
        }
    }
}

void silu_mul_avx512(float* gate, const float* up, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(gate + i, silu_mul512(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(gate + i, m,
                              silu_mul512(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
    }
}

void rms_norm_rows_avx512(float* x, int64_t rows, int64_t d, const float* w, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        float* v = x + r * d;
        __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();
        int64_t i = 0;
        for (; i + 16 <= d; i += 16) {
            const __m512 f = _mm512_loadu_ps(v + i);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
            const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
            s0 = _mm512_fmadd_pd(lo, lo, s0); // the squares of floats are exact in double
            s1 = _mm512_fmadd_pd(hi, hi, s1);
        }
        if (i < d) {
            const __mmask16 m = __mmask16((1u << (d - i)) - 1u);
            const __m512 f = _mm512_maskz_loadu_ps(m, v + i);
            const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(f));
            const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1)));
            s0 = _mm512_fmadd_pd(lo, lo, s0);
            s1 = _mm512_fmadd_pd(hi, hi, s1);
        }
        const double ss = _mm512_reduce_add_pd(_mm512_add_pd(s0, s1));
        const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
        const __m512 vi = _mm512_set1_ps(inv);
        for (i = 0; i < d; i += 16) {
            const __mmask16 m = d - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (d - i)) - 1u);
            _mm512_mask_storeu_ps(v + i, m,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(m, w + i), _mm512_mul_ps(_mm512_maskz_loadu_ps(m, v + i), vi)));
        }
    }
}

void f32_to_bf16_avx512(const float* x, uint16_t* y, size_t n) {
    const auto conv = [](__m512i b) {
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
        const __m512i rounded =
            _mm512_srli_epi32(_mm512_add_epi32(b, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
        const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(0x40));
        const __mmask16 nan =
            _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
        return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
    };
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i*)(y + i), conv(_mm512_loadu_si512(x + i)));
    if (i < n) {
        const __mmask16 m = __mmask16((1u << (n - i)) - 1u);
        _mm256_mask_storeu_epi16(y + i, m, conv(_mm512_maskz_loadu_epi32(m, x + i)));
    }
}

} // namespace qasr::cpu
