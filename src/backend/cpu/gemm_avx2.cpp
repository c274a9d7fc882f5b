// Matrix-matrix products on AVX2 + FMA without a BLAS (KernelTable::gemm_rows of the AVX2 table):
// y[m, n] = Σ_k x[m, k] · W[n, k] for the rows [n0, n1) of a float32, bf16 or MLX-quantized W.
//
// The path before converted tiles of W to float32 and called sgemm, which copies that tile again into its own
// layout, copies x again for every tile and first scales y by beta = 0 (perf, Zen 2, 2 threads, 0.6B 8-bit, 11 s:
// sgemm's kernel 41 % of the run's samples, those copies and the beta pass 10 %, the conversion 2 %). Here W is
// converted once, straight into the layout the micro-kernel reads: for 16 rows of W and kKC values of k, a panel
// bp[k][16] (16 KB, L1-resident while every block of 6 rows of x passes over it). The micro-kernel holds a 6 × 16
// block of y in 12 ymm accumulators and per k broadcasts x[m, k] of its 6 rows against the panel's two vectors
// (12 FMAs, 8 loads). The next panel's bytes of W are prefetched while a panel is used: a panel reads 16 short runs
// that the hardware prefetchers do not see coming.
//
// Every y[m, n] is one chain of fused multiply-adds over k in order (the chain leaves its registers only between
// kKC-blocks, through y itself, exactly), so a row's result does not depend on M, on the tiling or on the thread
// count — the same property as the bf16 engines (bf16_gemm.hpp), which sgemm does not promise.
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/transpose8.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

namespace qasr::cpu {
namespace {

constexpr int kNR = 16;  // output columns (rows of W) per panel: two ymm
constexpr int kMR = 6;   // rows of x per micro-kernel call: 12 accumulators + 2 panel vectors + 1 broadcast
constexpr int kKC = 256; // k per panel: 16 KB

#include "backend/cpu/kernels_generic.inc" // bf16f, code_at (compiled here with the AVX2 flags)

// Codes k .. k+7 of a row (k a multiple of 8) as int32 lanes: MLX packs element 0 into the lowest bits.
inline __m256i codes8(const uint8_t* row, int64_t k, int bits) {
    if (bits == 8) return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + k)));
    if (bits == 4) {
        uint32_t v;
        std::memcpy(&v, row + k / 2, 4);
        const __m128i b = _mm_cvtsi32_si128(int(v)), m = _mm_set1_epi8(15);
        const __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        return _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi)); // lo0 hi0 lo1 hi1 …
    }
    // 6 bits: 8 codes in 6 bytes, 4 per 24-bit word
    uint64_t v = 0;
    std::memcpy(&v, row + k / 8 * 6, 6);
    const int a = int(v & 0xffffff), b = int((v >> 24) & 0xffffff);
    const __m256i w = _mm256_setr_epi32(a, a, a, a, b, b, b, b);
    return _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_setr_epi32(0, 6, 12, 18, 0, 6, 12, 18)), _mm256_set1_epi32(63));
}

// Row r's value at column k of a quantized W, any width (the scalar path: widths 2, 3, 5, or odd group sizes).
inline float q_value(const MatrixRef& W, int64_t n, int64_t k) {
    const int64_t ng = W.K / W.gs, g = n * ng + k / W.gs;
    const uint8_t* row = static_cast<const uint8_t*>(W.data) + n * (W.K * W.bits / 8);
    return std::fma(bf16f(W.scales[g]), float(code_at(row, k, W.bits)), bf16f(W.biases[g]));
}

// bp[k·16 + c] = load(c, k) for c < nv (zero for the others), k < kc; load(c, k) gives 8 values of row c from
// column k (k a multiple of 8), scalar(c, k) one value (the columns past the last multiple of 8).
template <class Load8, class Load1>
inline void transpose_into(int nv, int kc, float* bp, Load8 load, Load1 scalar) {
    int k = 0;
    for (; k + 8 <= kc; k += 8)
        for (int h = 0; h < 2; ++h) {
            __m256 r[8];
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) r[i] = 8 * h + i < nv ? load(8 * h + i, k) : _mm256_setzero_ps();
            transpose8x8(r);
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) _mm256_store_ps(bp + (k + i) * kNR + 8 * h, r[i]);
        }
    for (; k < kc; ++k)
        for (int c = 0; c < kNR; ++c) bp[k * kNR + c] = c < nv ? scalar(c, k) : 0.0f;
}

// The panel of rows p0 .. p0+nv−1 (nv ≤ 16; the others zero) and columns k0 .. k0+kc−1: bp[(k − k0)·16 + c].
// Quantized rows are first widened row by row into `rows` [16 × kKC] (a group's scale and bias loaded once), then
// transposed like float32 ones.
void pack_panel(const MatrixRef& W, int64_t p0, int nv, int64_t k0, int kc, float* bp, float* rows) {
    const int64_t K = W.K;
    if (W.fmt == MatrixRef::F32) {
        const float* w = static_cast<const float*>(W.data) + p0 * K + k0;
        return transpose_into(nv, kc, bp, [&](int c, int k) { return _mm256_loadu_ps(w + c * K + k); },
                              [&](int c, int k) { return w[c * K + k]; });
    }
    if (W.fmt == MatrixRef::BF16) {
        const uint16_t* w = static_cast<const uint16_t*>(W.data) + p0 * K + k0;
        return transpose_into(
            nv, kc, bp,
            [&](int c, int k) {
                const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + c * K + k));
                return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            },
            [&](int c, int k) { return bf16f(w[c * K + k]); });
    }
    const bool vec = W.gs % 8 == 0 && k0 % W.gs == 0 && (W.bits == 4 || W.bits == 6 || W.bits == 8);
    const int64_t ng = K / W.gs, row_bytes = K * W.bits / 8;
    for (int c = 0; c < nv; ++c) {
        float* o = rows + c * kKC;
        const int64_t n = p0 + c;
        if (!vec) {
            for (int k = 0; k < kc; ++k) o[k] = q_value(W, n, k0 + k);
            continue;
        }
        const uint8_t* row = static_cast<const uint8_t*>(W.data) + n * row_bytes;
        for (int g0 = 0; g0 < kc; g0 += W.gs) {
            const int64_t g = n * ng + (k0 + g0) / W.gs;
            const __m256 sv = _mm256_set1_ps(bf16f(W.scales[g])), bv = _mm256_set1_ps(bf16f(W.biases[g]));
            const int ge = std::min(kc, g0 + W.gs);
            // s·q + b as one fused multiply-add: the value the tables' q_dequant gives (compiled with contraction);
            // the width as a constant, so codes8 is unrolled for it
            const auto widen = [&](auto bits) {
                for (int k = g0; k < ge; k += 8)
                    _mm256_store_ps(o + k, _mm256_fmadd_ps(sv, _mm256_cvtepi32_ps(codes8(row, k0 + k, bits)), bv));
            };
            if (W.bits == 8) widen(std::integral_constant<int, 8>{});
            else if (W.bits == 4) widen(std::integral_constant<int, 4>{});
            else widen(std::integral_constant<int, 6>{});
        }
    }
    transpose_into(nv, kc, bp, [&](int c, int k) { return _mm256_load_ps(rows + c * kKC + k); },
                   [&](int c, int k) { return rows[c * kKC + k]; });
}

// Asks for the bytes pack_panel will read for rows p0 .. p0+nv−1, columns k0 .. k0+kc−1 (16 runs of a quarter of
// an 8-bit row at K = 1024): without it a pack waited for its lines from DRAM (8-bit, 28 distinct 3072 × 1024
// matrices, one Zen 2 core: 13.3 → 17.7 GFLOP/s at 4 rows of x, 80.5 → 82.6 at 158).
void prefetch_panel(const MatrixRef& W, int64_t p0, int nv, int64_t k0, int kc) {
    // (as asm: GCC 12 judged a function of only _mm_prefetch calls free of effects and deleted its calls)
    const auto run = [](const void* p, int64_t bytes) {
        const char* b = static_cast<const char*>(p);
        for (int64_t o = 0; o < bytes; o += 64) asm volatile("prefetcht0 %0" ::"m"(b[o]));
        asm volatile("prefetcht0 %0" ::"m"(b[bytes - 1]));
    };
    const int64_t K = W.K;
    for (int c = 0; c < nv; ++c) {
        const int64_t n = p0 + c;
        if (W.fmt == MatrixRef::F32) run(static_cast<const float*>(W.data) + n * K + k0, int64_t(kc) * 4);
        else if (W.fmt == MatrixRef::BF16) run(static_cast<const uint16_t*>(W.data) + n * K + k0, int64_t(kc) * 2);
        else {
            run(static_cast<const uint8_t*>(W.data) + n * (K * W.bits / 8) + k0 * W.bits / 8, int64_t(kc) * W.bits / 8);
            const int64_t g = n * (K / W.gs) + k0 / W.gs, ng = std::max<int64_t>(1, kc / W.gs);
            run(W.scales + g, ng * 2);
            run(W.biases + g, ng * 2);
        }
    }
}

// c[i·ldc + 0 .. 15] (= or +=) Σ_{k < kc} x[i·ldx + k] · bp[k·16 + 0 .. 15] for the MR rows i.
// The accumulators are named variables, not an array, and the kernel is not inlined: with an array (or inlined into
// the driver) GCC 12 kept some accumulators on the stack, storing them after every FMA (82 → 42 GFLOP/s on one
// Zen 2 core).
#define QASR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
template <int MR>
__attribute__((noinline)) void micro(const float* x, int64_t ldx, const float* bp, int kc, float* c, int64_t ldc,
                                     bool first) {
#define QASR_DECL(i) __m256 a##i##0 = _mm256_setzero_ps(), a##i##1 = _mm256_setzero_ps();
    QASR_ROWS(QASR_DECL)
#undef QASR_DECL
#define QASR_LOAD(i)                                                                                                   \
    if constexpr (i < MR)                                                                                              \
        if (!first) a##i##0 = _mm256_loadu_ps(c + i * ldc), a##i##1 = _mm256_loadu_ps(c + i * ldc + 8);
    QASR_ROWS(QASR_LOAD)
#undef QASR_LOAD
    const float* x0 = x;
    const float* x3 = x + 3 * ldx;
#pragma GCC unroll 4
    for (int k = 0; k < kc; ++k) {
        const __m256 b0 = _mm256_load_ps(bp + k * kNR), b1 = _mm256_load_ps(bp + k * kNR + 8);
#define QASR_STEP(i)                                                                                                   \
    if constexpr (i < MR) {                                                                                            \
        const __m256 v = _mm256_broadcast_ss((i < 3 ? x0 + i * ldx : x3 + (i - 3) * ldx) + k);                         \
        a##i##0 = _mm256_fmadd_ps(v, b0, a##i##0);                                                                     \
        a##i##1 = _mm256_fmadd_ps(v, b1, a##i##1);                                                                     \
    }
        QASR_ROWS(QASR_STEP)
#undef QASR_STEP
    }
#define QASR_STORE(i)                                                                                                  \
    if constexpr (i < MR) _mm256_storeu_ps(c + i * ldc, a##i##0), _mm256_storeu_ps(c + i * ldc + 8, a##i##1);
    QASR_ROWS(QASR_STORE)
#undef QASR_STORE
}
#undef QASR_ROWS

void micro_rows(int mr, const float* x, int64_t ldx, const float* bp, int kc, float* c, int64_t ldc, bool first) {
    switch (mr) {
    case 1: return micro<1>(x, ldx, bp, kc, c, ldc, first);
    case 2: return micro<2>(x, ldx, bp, kc, c, ldc, first);
    case 3: return micro<3>(x, ldx, bp, kc, c, ldc, first);
    case 4: return micro<4>(x, ldx, bp, kc, c, ldc, first);
    case 5: return micro<5>(x, ldx, bp, kc, c, ldc, first);
    default: return micro<6>(x, ldx, bp, kc, c, ldc, first);
    }
}

} // namespace

void avx2_gemm_rows(const float* x, int64_t ldx, int64_t M, const MatrixRef& W, int64_t n0, int64_t n1, float* y,
                    int64_t ldy) {
    if (M <= 0 || n1 <= n0) return;
    alignas(64) thread_local float bp[kKC * kNR];
    alignas(64) thread_local float rows[kNR * kKC]; // quantized rows widened before the transpose
    thread_local std::vector<float> tail; // the last panel when it has fewer than 16 rows: [M × 16]
    const int64_t K = W.K;
    const int64_t full_end = n0 + (n1 - n0) / kNR * kNR;
    if (full_end < n1) tail.assign(size_t(M * kNR), 0.0f);
    // k blocks outermost: the block's columns of x (M × kKC floats) stay in the cache for every panel of the tile
    for (int64_t k0 = 0; k0 < K; k0 += kKC) {
        const int kc = int(std::min<int64_t>(kKC, K - k0));
        for (int64_t p0 = n0; p0 < n1; p0 += kNR) {
            const int nv = int(std::min<int64_t>(kNR, n1 - p0));
            pack_panel(W, p0, nv, k0, kc, bp, rows);
            if (p0 + kNR < n1) // the next panel of this k block, else the first one of the next k block
                prefetch_panel(W, p0 + kNR, int(std::min<int64_t>(kNR, n1 - p0 - kNR)), k0, kc);
            else if (k0 + kKC < K)
                prefetch_panel(W, n0, int(std::min<int64_t>(kNR, n1 - n0)), k0 + kKC, int(std::min<int64_t>(kKC, K - k0 - kKC)));
            float* c = nv == kNR ? y + p0 : tail.data();
            const int64_t ldc = nv == kNR ? ldy : kNR;
            // blocks of 6 rows; a remainder of 1 or 2 is merged with the last block into two of 4 and 3 or 4 (a 1- or
            // 2-row call runs at half the FMA rate: as many loads as FMAs)
            const int64_t tail_rows = M > kMR && M % kMR != 0 && M % kMR <= 2 ? kMR + M % kMR : 0;
            const int64_t body = M - tail_rows;
            for (int64_t m = 0; m < body; m += kMR)
                micro_rows(int(std::min<int64_t>(kMR, body - m)), x + m * ldx + k0, ldx, bp, kc, c + m * ldc, ldc,
                           k0 == 0);
            if (tail_rows) {
                micro_rows(4, x + body * ldx + k0, ldx, bp, kc, c + body * ldc, ldc, k0 == 0);
                micro_rows(int(tail_rows - 4), x + (body + 4) * ldx + k0, ldx, bp, kc, c + (body + 4) * ldc, ldc,
                           k0 == 0);
            }
        }
    }
    if (full_end < n1)
        for (int64_t m = 0; m < M; ++m)
            std::memcpy(y + m * ldy + full_end, tail.data() + m * kNR, size_t(n1 - full_end) * sizeof(float));
}

} // namespace qasr::cpu
