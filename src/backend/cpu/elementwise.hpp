// Single-threaded forms of the elementwise ops (ops::rms_norm, ops::silu_mul run them per row / chunk on the thread
// team): for callers already inside a parallel region (the fused decode step), where the ops' own `omp parallel`
// would open a nested one-thread region per call (≈1 µs each, 80 of them per layer).
#pragma once
#include <cstddef>
#include <cstdint>

namespace qasr::cpu {

void rms_norm_serial(float* x, int64_t rows, int64_t d, const float* w, float eps); // in place, as ops::rms_norm
void silu_mul_serial(float* gate, const float* up, size_t n);                        // as ops::silu_mul

// x ← 0.5·x·(1 + erf(x/√2)) with std::erf (the portable table's gelu_erf; ops::gelu_erf runs the active table's).
void gelu_erf_serial(float* x, size_t n);

// erf on [0, 4) in 32 intervals of width 1/8 for the SIMD tables: interval i (i = ⌊8|x|⌋) holds the degree-7
// Taylor polynomial of erf around its centre (0 for interval 0, where the series is odd and keeps full relative
// precision near 0; (i + ½)/8 otherwise), coefficients from the Hermite recurrence in long double, rounded to
// float. Truncation < 3e-10 relative on every interval (far under float's 6e-8); Horner in float32 FMA adds
// ≈1 ulp. erf = 1 from |x| ≥ 4 (erf(4) rounds to 1 in float). c[j][i]: coefficient of t^j on interval i,
// t = |x| − centre_i (centre: ctr[i]).
// rec[i][j] = c[j][i]: interval i's coefficients as one 32-byte record (the AVX2 erf loads a record per lane and
// transposes, instead of gathering each coefficient).
struct ErfTable {
    alignas(64) float c[8][32];
    alignas(64) float ctr[32];
    alignas(64) float rec[32][8];
};
const ErfTable& erf_table();

} // namespace qasr::cpu
