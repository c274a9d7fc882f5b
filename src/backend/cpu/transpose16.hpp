// 16 × 16 transpose of 32-bit lanes in AVX-512 registers (include only from files compiled with -mavx512f):
// r[i] lane j → r[j] lane i. Used to turn AMX C tiles into row-major outputs and 32-bit bf16 pairs into the VNNI
// layout of B tiles.
#pragma once
#include <immintrin.h>

namespace qasr::cpu {

inline void transpose16x16(__m512 r[16]) {
    __m512 t[16];
    for (int i = 0; i < 8; ++i) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; ++i) { // r[4i + j]: rows 4i..4i+3, column 4·lane + j in each 128-bit lane
        const __m512d a0 = _mm512_castps_pd(t[4 * i]), a1 = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d a2 = _mm512_castps_pd(t[4 * i + 2]), a3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
    }
    for (int j = 0; j < 4; ++j) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);     // rows 0–7: columns j, 8+j
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd); // rows 0–7: columns 4+j, 12+j
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    for (int j = 0; j < 4; ++j) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

} // namespace qasr::cpu
