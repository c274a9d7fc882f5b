// Vectorized e^x in AVX-512 (include only from files compiled with -mavx512f): 0 below ≈ −104, ∞ above ≈ 88.7, as
// std::exp; x clamped to ±150 first, where that already holds, so that the error term stays finite; NaN becomes 0.
// x·log2(e) = t is carried as t_hi + t_lo (FMA error term plus the constant's own rounding), t = n + f with
// |f| ≤ ½, 2^f = e^(f·ln2) by its degree-7 Taylor polynomial (truncation ≈ 5e-9 relative), times 2^n with
// vscalefps. Used by the softmax / exp-sum kernels and by SiLU·up.
#pragma once
#include <immintrin.h>

#include <initializer_list>

namespace qasr::cpu {

inline __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-150.0f)), _mm512_set1_ps(150.0f));
    const __m512 L = _mm512_set1_ps(1.44269504088896341f);
    const __m512 t = _mm512_mul_ps(x, L);
    const __m512 t_lo = _mm512_fmadd_ps(x, _mm512_set1_ps(1.925963e-8f), _mm512_fmsub_ps(x, L, t));
    const __m512 nn = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_mul_ps(_mm512_add_ps(_mm512_sub_ps(t, nn), t_lo), _mm512_set1_ps(0.693147180559945f));
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    for (const float c : {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f})
        p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(c));
    return _mm512_scalef_ps(p, nn);
}

// silu(g)·u = g / (1 + e^(−g)) · u with exp512 (ops::silu_mul_fast's arithmetic, per lane).
inline __m512 silu_mul512(__m512 g, __m512 u) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

} // namespace qasr::cpu
