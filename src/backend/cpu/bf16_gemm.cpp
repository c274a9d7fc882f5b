// bf16 GEMM on AMX tiles or AVX512-BF16 vectors (compiled with -mamx-tile -mamx-bf16 -mavx512f -mavx512bf16; the
// tile instructions run only after amx_available(), the vector ones only after bf16_gemm_available()).
// AMX: roles are swapped so that W needs no packing: each C tile is 16 rows of W (the A operand, read straight from
// row-major bf16 weights) times 16 columns of xᵀ (the B operand, x packed once per product into the VNNI pair
// layout: tile (m16, k32) row r holds (x[m][2r], x[m][2r+1]) for the 16 m). C tiles hold yᵀ and are transposed on
// the way out. Blocks of 32 W rows × 32 x rows use all 8 tiles (4 C, 2 A, 2 B). The vector engine (dot_block) reads
// the same packed x and W rows and writes the same yT, so everything around the products is shared.
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/exp_avx512.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/transpose16.hpp"
#include "core/dtype.hpp"

#include <immintrin.h>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qasr::cpu {
namespace {

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

bool request_amx() {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool tile = d & (1u << 24), bf16 = d & (1u << 22);
    if (!tile || !bf16) return false;
    constexpr long ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18;
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

} // namespace

void amx_load_tile_config() {
    thread_local bool loaded = false;
    if (loaded || !amx_available()) return;
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    // GCC 12 does not see ldtilecfg read cfg and may drop the stores above (then every tile op faults): a barrier.
    asm volatile("" : : "m"(cfg) : "memory");
    _tile_loadconfig(&cfg);
    loaded = true;
}

namespace {

#include "backend/cpu/kernels_generic.inc"

// Tile loads and stores whose rows are not 64-byte aligned take ~5× as long (measured: ~15 ns instead of ~3 ns per
// 1 KiB tile from L1, on this machine's AMX), so every buffer tiles touch is aligned: v sized for n elements plus
// 64 bytes of slack, the returned pointer rounded up to 64 bytes.
template <typename T> T* align64(T* p) {
    return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
}
template <typename T> T* aligned_buf(std::vector<T>& v, size_t n) {
    v.resize(n + 64 / sizeof(T));
    return align64(v.data());
}

// 32 consecutive codes of one group → 32 bf16 values s·q + b (float32 FMA, round to nearest even): the same
// arithmetic as the scalar path, vectorized. 8-bit: 32 bytes; 4-bit: 16 bytes, low nibble first.
inline void deq32_u8(const __m128i c0, const __m128i c1, __m512 s, __m512 b, uint16_t* o) {
    const __m512 lo = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c0)), b);
    const __m512 hi = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c1)), b);
    _mm512_storeu_si512(o, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

// Codes of groups [g0, g1) of one row → bf16 o[0, (g1 − g0)·gs).
inline void deq_groups(const uint8_t* row, const uint16_t* sc, const uint16_t* bi, int64_t g0, int64_t g1, int bits,
                       int gs, uint16_t* o) {
    if (bits == 8) {
        for (int64_t g = g0; g < g1; ++g, o += gs) {
            const __m512 s = _mm512_set1_ps(bf16f(sc[g])), b = _mm512_set1_ps(bf16f(bi[g]));
            const uint8_t* p = row + g * gs;
            for (int j = 0; j < gs; j += 32)
                deq32_u8(_mm_loadu_si128((const __m128i*)(p + j)), _mm_loadu_si128((const __m128i*)(p + j + 16)), s, b,
                         o + j);
        }
        return;
    }
    if (bits == 4) {
        const __m256i lo4 = _mm256_set1_epi16(0x000f), hi4 = _mm256_set1_epi16(0x00f0);
        for (int64_t g = g0; g < g1; ++g, o += gs) {
            const __m512 s = _mm512_set1_ps(bf16f(sc[g])), b = _mm512_set1_ps(bf16f(bi[g]));
            const uint8_t* p = row + g * gs / 2;
            for (int j = 0; j < gs; j += 32) {
                // byte i → 16-bit lane (lo nibble) | (hi nibble) << 8: the 32 codes in order as bytes
                const __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(p + j / 2)));
                const __m256i c = _mm256_or_si256(_mm256_and_si256(v, lo4), _mm256_slli_epi16(_mm256_and_si256(v, hi4), 4));
                deq32_u8(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1), s, b, o + j);
            }
        }
        return;
    }
    const int64_t gbytes = int64_t(gs) * bits / 8;
    alignas(64) float q[1024];
    for (int64_t g = g0; g < g1; ++g, o += gs) {
        unpack_group(row + g * gbytes, bits, gs, q);
        const __m512 s = _mm512_set1_ps(bf16f(sc[g])), b = _mm512_set1_ps(bf16f(bi[g]));
        for (int j = 0; j < gs; j += 32) {
            const __m512 lo = _mm512_fmadd_ps(s, _mm512_load_ps(q + j), b);
            const __m512 hi = _mm512_fmadd_ps(s, _mm512_load_ps(q + j + 16), b);
            _mm512_storeu_si512(o + j, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

// The vector engine, for CPUs with AVX512-BF16 but no AMX tiles (AMD Zen 4 and later, Intel Cooper Lake; or
// QASR_AMX=0): the same products on the same operands, vdpbf16ps instead of tdpbf16ps. Lane i of an x vector is
// the pair (x[m0 + i][2p], x[m0 + i][2p + 1]) of px's layout as it is; each A row's pair (a[n][2p], a[n][2p + 1])
// is broadcast, so a vector of 16 float32 sums per A row and 16 m accumulates yT[n][m0, m0 + 16) — the tile
// engine's yT, summed pair by pair in k order (float32, as the tiles; the two engines may differ in the last bits).
// 8 A rows × MV blocks of 16 m per register block (24 accumulators for MV = 3).
template <int MV>
inline void dot_rows8(const uint16_t* a, int64_t lda, int64_t kb0, int64_t nkb, const uint16_t* xb, int64_t mstride,
                      float* c, int64_t Mp, bool acc) {
    __m512 s[MV][8];
    for (int i = 0; i < MV; ++i)
        for (int n = 0; n < 8; ++n) s[i][n] = acc ? _mm512_loadu_ps(c + n * Mp + i * 16) : _mm512_setzero_ps();
    for (int64_t kb = 0; kb < nkb; ++kb) {
        const uint16_t* xt = xb + (kb0 + kb) * 512;
        const uint16_t* ak = a + kb * 32;
        for (int p = 0; p < 16; ++p) {
            __m512bh xv[MV];
            for (int i = 0; i < MV; ++i) xv[i] = (__m512bh)_mm512_load_si512(xt + i * mstride + p * 32);
            for (int n = 0; n < 8; ++n) {
                int32_t pair;
                std::memcpy(&pair, ak + n * lda + 2 * p, 4);
                const __m512bh w = (__m512bh)_mm512_set1_epi32(pair);
                for (int i = 0; i < MV; ++i) s[i][n] = _mm512_dpbf16_ps(s[i][n], xv[i], w);
            }
        }
    }
    for (int i = 0; i < MV; ++i)
        for (int n = 0; n < 8; ++n) _mm512_storeu_ps(c + n * Mp + i * 16, s[i][n]);
}

// Few x rows (M ≤ 8, one block of 16 m): the roles turned — a vector of 16 A rows per x row, each x pair broadcast —
// so that no lane is idle for want of x rows. The A rows' pairs come from a 16 × 16 transpose of 32-bit lanes per
// 32 columns; yT's 16 × 16 block is transposed in and out around the chunk. Every sum is the chain dot_rows8 makes
// (the pairs in k order, each product pair commuting), so a row's result does not depend on M, bit for bit.
template <int M>
inline void dot_rows16_few(const uint16_t* a, int64_t lda, int64_t kb0, int64_t nkb, const uint16_t* xb, float* c,
                           bool acc) {
    __m512 s[16];
    if (acc) {
        for (int n = 0; n < 16; ++n) s[n] = _mm512_loadu_ps(c + n * 16);
        transpose16x16(s); // s[m]: yT[n][m] over the 16 n
    } else {
        for (int m = 0; m < M; ++m) s[m] = _mm512_setzero_ps();
    }
    const int32_t* x32 = reinterpret_cast<const int32_t*>(xb);
    for (int64_t kb = 0; kb < nkb; ++kb) {
        __m512 w[16];
        for (int n = 0; n < 16; ++n) w[n] = _mm512_loadu_ps(reinterpret_cast<const float*>(a + n * lda + kb * 32));
        transpose16x16(w); // w[p]: the pair p of the 16 rows
        const int32_t* xp = x32 + (kb0 + kb) * 256;
        for (int p = 0; p < 16; ++p)
            for (int m = 0; m < M; ++m)
                s[m] = _mm512_dpbf16_ps(s[m], (__m512bh)w[p], (__m512bh)_mm512_set1_epi32(xp[p * 16 + m]));
    }
    for (int m = M; m < 16; ++m) s[m] = _mm512_setzero_ps();
    transpose16x16(s);
    for (int n = 0; n < 16; ++n) _mm512_storeu_ps(c + n * 16, s[n]);
}

// yT[n][m] (+= when acc) Σ a[n][k]·x[m][k0 + k] over k < kc (multiples of 32), for the groups of 8 rows (16 with few
// x rows) holding rows [0, nr) of a (rows up to the next multiple of 16 must be readable; their results are not
// used), every m < px.Mp.
void dot_block(const uint16_t* a, int64_t lda, int64_t nr, int64_t k0, int64_t kc, const Bf16PackedX& px, float* yT,
               bool acc) {
    const int64_t Mp = px.Mp, mstride = px.Kp / 32 * 512, blocks = Mp / 16;
    if (Mp == 16 && px.M <= 8) {
        for (int64_t n0 = 0; n0 < nr; n0 += 16) {
            const uint16_t* an = a + n0 * lda;
            float* c = yT + n0 * 16;
            switch (px.M) {
            case 1: dot_rows16_few<1>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 2: dot_rows16_few<2>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 3: dot_rows16_few<3>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 4: dot_rows16_few<4>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 5: dot_rows16_few<5>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 6: dot_rows16_few<6>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            case 7: dot_rows16_few<7>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            default: dot_rows16_few<8>(an, lda, k0 / 32, kc / 32, px.data, c, acc); break;
            }
        }
        return;
    }
    for (int64_t n0 = 0; n0 < nr; n0 += 8)
        for (int64_t b = 0; b < blocks;) {
            // groups of 3 blocks of 16 m; a remainder of 1 after at least one group makes the last two groups 2 + 2
            const int64_t left = blocks - b, mv = left == 4 ? 2 : std::min<int64_t>(3, left);
            const uint16_t* xb = px.data + b * mstride;
            float* c = yT + n0 * Mp + b * 16;
            b += mv;
            switch (mv) {
            case 1: dot_rows8<1>(a + n0 * lda, lda, k0 / 32, kc / 32, xb, mstride, c, Mp, acc); break;
            case 2: dot_rows8<2>(a + n0 * lda, lda, k0 / 32, kc / 32, xb, mstride, c, Mp, acc); break;
            default: dot_rows8<3>(a + n0 * lda, lda, k0 / 32, kc / 32, xb, mstride, c, Mp, acc); break;
            }
        }
}

// One block of 32 rows of A (bf16, row stride lda, K a multiple of 32) times every m block of px → C tiles stored
// into yT (32 rows, row stride Mp). Blocks of 32 m use all 8 tiles (4 C, 2 A, 2 B); a last block of 16 m uses 2 C.
// pf, pf_bytes: memory to bring into L2 meanwhile (the next block's codes), spread over the k loop.
void tile_block(const uint16_t* a0, int64_t lda, const Bf16PackedX& px, float* yT, const uint8_t* pf = nullptr,
                int64_t pf_bytes = 0) {
    if (!amx_available()) return dot_block(a0, lda, 32, 0, px.Kp, px, yT, false);
    const int64_t KB = px.Kp / 32, Mp = px.Mp;
    const int64_t pf_step = pf ? std::max<int64_t>(64, (pf_bytes / (KB * ((Mp + 31) / 32)) + 63) / 64 * 64) : 0;
    int64_t pf_at = 0;
    auto prefetch = [&] {
        if (pf_at < pf_bytes) {
            for (int64_t o = 0; o < pf_step && pf_at + o < pf_bytes; o += 64) _mm_prefetch((const char*)(pf + pf_at + o), _MM_HINT_T1);
            pf_at += pf_step;
        }
    };
    const uint16_t* a1 = a0 + 16 * lda;
    int64_t m0 = 0;
    for (; m0 + 32 <= Mp; m0 += 32) {
        const uint16_t* b0 = px.data + (m0 / 16) * KB * 512;
        const uint16_t* b1 = b0 + KB * 512;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int64_t kb = 0; kb < KB; ++kb) {
            prefetch();
            _tile_loadd(4, a0 + kb * 32, lda * 2);
            _tile_loadd(5, a1 + kb * 32, lda * 2);
            _tile_loadd(6, b0 + kb * 512, 64);
            _tile_loadd(7, b1 + kb * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
        }
        float* c = yT + m0;
        _tile_stored(0, c, Mp * 4);
        _tile_stored(1, c + 16, Mp * 4);
        _tile_stored(2, c + 16 * Mp, Mp * 4);
        _tile_stored(3, c + 16 * Mp + 16, Mp * 4);
    }
    if (m0 < Mp) { // 16 m left
        const uint16_t* b0 = px.data + (m0 / 16) * KB * 512;
        _tile_zero(0);
        _tile_zero(2);
        for (int64_t kb = 0; kb < KB; ++kb) {
            prefetch();
            _tile_loadd(4, a0 + kb * 32, lda * 2);
            _tile_loadd(5, a1 + kb * 32, lda * 2);
            _tile_loadd(6, b0 + kb * 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(2, 5, 6);
        }
        float* c = yT + m0;
        _tile_stored(0, c, Mp * 4);
        _tile_stored(2, c + 16 * Mp, Mp * 4);
    }
}

// y[m, n] = yT[n, m] for n < n_valid, m < M. yT has whole 16 × 16 blocks (Mp a multiple of 16, rows padded to a
// multiple of 16), so every block is transposed in registers; stores are masked to the valid part.
void transpose_out(const float* yT, int64_t Mp, int64_t M, int64_t n_valid, float* y, int64_t ldy) {
    for (int64_t n0 = 0; n0 < n_valid; n0 += 16) {
        const int64_t nn = std::min<int64_t>(16, n_valid - n0);
        const __mmask16 mask = __mmask16((1u << nn) - 1u);
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            const float* src = yT + n0 * Mp + m0;
            __m512 c[16];
            for (int i = 0; i < 16; ++i) c[i] = _mm512_loadu_ps(src + i * Mp);
            transpose16x16(c);
            const int64_t mm = std::min<int64_t>(16, M - m0);
            for (int64_t i = 0; i < mm; ++i) _mm512_mask_storeu_ps(y + (m0 + i) * ldy + n0, mask, c[i]);
        }
    }
}

} // namespace

void bf16_q_dequant(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                   uint16_t* out, int64_t ldo, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * bits / 8;
    for (int64_t r = r0; r < r1; ++r)
        deq_groups(W + r * row_bytes, scales + r * ng, biases + r * ng, 0, ng, bits, gs, out + (r - r0) * ldo);
}

namespace {

// One block of nr ≤ 32 rows of A (fill(r, k0, kc, dst): row r of the block, columns [k0, k0 + kc) as bf16 at dst),
// written KC columns at a time into the aligned L1-resident buffer wb (32·KC) and multiplied right away, so the A
// tiles come from L1 → yT (32 rows, row stride Mp; rows past nr are zero). With at most 32 x rows the C tiles stay
// in tile registers for the whole block; with more, each block of 32 x rows keeps its C tiles in yT (L1) between
// column chunks (exact: float32 stored and reloaded). K (a multiple of 32) and KC (a multiple of 32) need not
// divide each other.
template <typename Fill>
void block_rows(int64_t nr, int64_t K, int64_t KC, const Bf16PackedX& px, float* yT, uint16_t* wb, Fill fill) {
    if (!amx_available()) { // the vector engine: rows past nr are not computed (only those up to a multiple of 16)
        if (nr % 16) std::fill(wb + nr * KC, wb + (nr + 15) / 16 * 16 * KC, uint16_t(0));
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            const int64_t kc = std::min(KC, K - k0);
            for (int64_t r = 0; r < nr; ++r) fill(r, k0, kc, wb + r * KC);
            dot_block(wb, KC, nr, k0, kc, px, yT, k0 > 0);
        }
        return;
    }
    const int64_t Mp = px.Mp, KB = px.Kp / 32;
    const bool small = Mp <= 32;
    if (nr < 32) std::fill(wb + nr * KC, wb + 32 * KC, uint16_t(0));
    if (small) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
        const int64_t kc = std::min(KC, K - k0);
        for (int64_t r = 0; r < nr; ++r) fill(r, k0, kc, wb + r * KC);
        for (int64_t m0 = 0; m0 < Mp; m0 += 32) {
            const bool two = m0 + 32 <= Mp;
            const uint16_t* b0p = px.data + (m0 / 16) * KB * 512;
            const uint16_t* b1p = b0p + KB * 512;
            float* c = yT + m0;
            if (!small) {
                if (k0 == 0) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                } else {
                    _tile_loadd(0, c, Mp * 4);
                    _tile_loadd(2, c + 16 * Mp, Mp * 4);
                    if (two) {
                        _tile_loadd(1, c + 16, Mp * 4);
                        _tile_loadd(3, c + 16 * Mp + 16, Mp * 4);
                    }
                }
            }
            for (int64_t kb = 0; kb < kc / 32; ++kb) {
                const int64_t kx = k0 / 32 + kb;
                _tile_loadd(4, wb + kb * 32, KC * 2);
                _tile_loadd(5, wb + 16 * KC + kb * 32, KC * 2);
                _tile_loadd(6, b0p + kx * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(2, 5, 6);
                if (two) {
                    _tile_loadd(7, b1p + kx * 512, 64);
                    _tile_dpbf16ps(1, 4, 7);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            if (!small || k0 + kc >= K) {
                _tile_stored(0, c, Mp * 4);
                _tile_stored(2, c + 16 * Mp, Mp * 4);
                if (two) {
                    _tile_stored(1, c + 16, Mp * 4);
                    _tile_stored(3, c + 16 * Mp + 16, Mp * 4);
                }
            }
        }
    }
}

// Rows [0, rows) of A in blocks of 32 (fill(r, k0, kc, dst) with r counted from 0) → y[m, r] for r < rows,
// m < px.M.
template <typename Fill>
void chunked_rows(int64_t rows, int64_t K, int64_t KC, const Bf16PackedX& px, float* y, int64_t ldy, Fill fill) {
    amx_load_tile_config();
    thread_local std::vector<uint16_t> wbv;
    thread_local std::vector<float> yTv;
    float* const yT = aligned_buf(yTv, size_t(32 * px.Mp));
    uint16_t* const wb = aligned_buf(wbv, size_t(32 * KC));
    for (int64_t blk = 0; blk < rows; blk += 32) {
        const int64_t nr = std::min<int64_t>(32, rows - blk);
        block_rows(nr, K, KC, px, yT, wb, [&](int64_t r, int64_t k0, int64_t kc, uint16_t* dst) { fill(blk + r, k0, kc, dst); });
        transpose_out(yT, px.Mp, px.M, nr, y + blk, ldy);
    }
}

// h[m, n] = silu(gT[n, m])·uT[n, m] (silu_mul512, the arithmetic of ops::silu_mul_fast) for n < n_valid, m < M:
// transpose_out of both blocks, combined before the store.
void transpose_swiglu_out(const float* gT, const float* uT, int64_t Mp, int64_t M, int64_t n_valid, float* h,
                          int64_t ldh) {
    for (int64_t n0 = 0; n0 < n_valid; n0 += 16) {
        const int64_t nn = std::min<int64_t>(16, n_valid - n0);
        const __mmask16 mask = __mmask16((1u << nn) - 1u);
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            __m512 g[16], u[16];
            for (int i = 0; i < 16; ++i) g[i] = _mm512_loadu_ps(gT + (n0 + i) * Mp + m0);
            transpose16x16(g);
            for (int i = 0; i < 16; ++i) u[i] = _mm512_loadu_ps(uT + (n0 + i) * Mp + m0);
            transpose16x16(u);
            const int64_t mm = std::min<int64_t>(16, M - m0);
            for (int64_t i = 0; i < mm; ++i) _mm512_mask_storeu_ps(h + (m0 + i) * ldh + n0, mask, silu_mul512(g[i], u[i]));
        }
    }
}

} // namespace

void bf16_q_gemm_rows(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     int64_t n0, int64_t rows, const Bf16PackedX& px, float* y, int64_t ldy) {
    amx_load_tile_config();
    const int64_t Mp = px.Mp, Kp = px.Kp, ng = K / gs, row_bytes = K * bits / 8;
    thread_local std::vector<uint16_t> wbv;
    thread_local std::vector<float> yTv;
    float* yT = aligned_buf(yTv, size_t(32 * Mp));
    uint16_t* wb = nullptr;
    if (Kp != K) { // (not for MLX layouts, whose K is a multiple of the group size)
        // One block of 32 rows of W at a time is dequantized whole (32 × K bf16, 64 KiB for K = 1024,
        // in L2) and every m block reads it.
        wb = aligned_buf(wbv, size_t(32 * Kp));
        for (int64_t b0 = 0; b0 < rows; b0 += 32) {
            const int64_t nr = std::min<int64_t>(32, rows - b0);
            if (Kp != K)
                for (int64_t r = 0; r < nr; ++r) std::fill(wb + r * Kp + K, wb + (r + 1) * Kp, uint16_t(0));
            if (nr < 32) std::fill(wb + nr * Kp, wb + 32 * Kp, uint16_t(0));
            bf16_q_dequant(W, scales, biases, K, bits, gs, wb, Kp, n0 + b0, n0 + b0 + nr);
            const int64_t nxt = std::min<int64_t>(32, rows - b0 - nr); // the next block's codes, into L2 meanwhile
            tile_block(wb, Kp, px, yT, W + (n0 + b0 + nr) * row_bytes, nxt * row_bytes);
            transpose_out(yT, Mp, px.M, nr, y + b0, ldy);
        }
        return;
    }
    const int64_t KC = std::max<int64_t>(gs, 256 / gs * gs);
    { // the first block's codes into L2 at once (later blocks are prefetched one block ahead, chunk by chunk)
        const char* p0 = reinterpret_cast<const char*>(W + n0 * row_bytes);
        const int64_t bytes = std::min<int64_t>(32, rows) * row_bytes;
        for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p0 + o, _MM_HINT_T1);
    }
    chunked_rows(rows, K, KC, px, y, ldy, [&](int64_t r, int64_t k0, int64_t kc, uint16_t* dst) {
        const uint8_t* row = W + (n0 + r) * row_bytes;
        const uint8_t* nxt = row + 32 * row_bytes + k0 * bits / 8; // the same columns of the next block, into L1
        for (int64_t o = 0; o < kc * bits / 8; o += 64) _mm_prefetch((const char*)(nxt + o), _MM_HINT_T0);
        deq_groups(row, scales + (n0 + r) * ng, biases + (n0 + r) * ng, k0 / gs, (k0 + kc) / gs, bits, gs, dst);
    });
}

void bf16_q_swiglu_rows(const QMatrixRef& gate, const QMatrixRef& up, int64_t K, int64_t n0, int64_t rows,
                       const Bf16PackedX& px, float* h, int64_t ldh) {
    amx_load_tile_config();
    const int bits = gate.bits, gs = gate.gs;
    const int64_t ng = K / gs, row_bytes = K * bits / 8;
    const int64_t KC = std::max<int64_t>(gs, 256 / gs * gs);
    thread_local std::vector<uint16_t> wbv;
    thread_local std::vector<float> gTv, uTv;
    float* const gT = aligned_buf(gTv, size_t(32 * px.Mp));
    float* const uT = aligned_buf(uTv, size_t(32 * px.Mp));
    uint16_t* const wb = aligned_buf(wbv, size_t(32 * KC));
    {
        const char* p0 = reinterpret_cast<const char*>(gate.W + n0 * row_bytes);
        const int64_t bytes = std::min<int64_t>(32, rows) * row_bytes;
        for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(p0 + o, _MM_HINT_T1);
    }
    // the gate block, then the up block of the same rows, then both combined; each fill prefetches the codes
    // multiplied next (gate → the same rows of up, up → the next rows of gate)
    for (int64_t blk = 0; blk < rows; blk += 32) {
        const int64_t nr = std::min<int64_t>(32, rows - blk), r0 = n0 + blk;
        block_rows(nr, K, KC, px, gT, wb, [&](int64_t r, int64_t k0, int64_t kc, uint16_t* dst) {
            const uint8_t* nxt = up.W + (r0 + r) * row_bytes + k0 * bits / 8;
            for (int64_t o = 0; o < kc * bits / 8; o += 64) _mm_prefetch((const char*)(nxt + o), _MM_HINT_T0);
            deq_groups(gate.W + (r0 + r) * row_bytes, gate.scales + (r0 + r) * ng, gate.biases + (r0 + r) * ng, k0 / gs,
                       (k0 + kc) / gs, bits, gs, dst);
        });
        block_rows(nr, K, KC, px, uT, wb, [&](int64_t r, int64_t k0, int64_t kc, uint16_t* dst) {
            const uint8_t* nxt = gate.W + (r0 + r + 32) * row_bytes + k0 * bits / 8;
            for (int64_t o = 0; o < kc * bits / 8; o += 64) _mm_prefetch((const char*)(nxt + o), _MM_HINT_T0);
            deq_groups(up.W + (r0 + r) * row_bytes, up.scales + (r0 + r) * ng, up.biases + (r0 + r) * ng, k0 / gs,
                       (k0 + kc) / gs, bits, gs, dst);
        });
        transpose_swiglu_out(gT, uT, px.Mp, px.M, nr, h + blk, ldh);
    }
}

namespace {

// Rows [0, MB) of x (row stride K) times two float32 rows w0, w1 of length K → y[m, 0..1] (row stride ldy).
template <int MB>
inline void f32_rows2(const float* x, int64_t K, const float* w0, const float* w1, float* y, int64_t ldy, bool two) {
    __m512 a0[MB], a1[MB];
    for (int i = 0; i < MB; ++i) a0[i] = a1[i] = _mm512_setzero_ps();
    for (int64_t k = 0; k < K; k += 16) {
        const __m512 v0 = _mm512_load_ps(w0 + k), v1 = _mm512_load_ps(w1 + k);
        for (int i = 0; i < MB; ++i) {
            const __m512 xv = _mm512_loadu_ps(x + i * K + k);
            a0[i] = _mm512_fmadd_ps(v0, xv, a0[i]);
            a1[i] = _mm512_fmadd_ps(v1, xv, a1[i]);
        }
    }
    for (int i = 0; i < MB; ++i) {
        y[i * ldy] = _mm512_reduce_add_ps(a0[i]);
        if (two) y[i * ldy + 1] = _mm512_reduce_add_ps(a1[i]);
    }
}

} // namespace

void q_gemm_f32_rows(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                     int64_t n0, int64_t n1, const float* x, int64_t M, float* y, int64_t ldy) {
    const int64_t ng = K / gs, row_bytes = K * bits / 8;
    // 64 rows of W at a time are dequantized into a buffer that stays in L2 (256 KiB for K = 1024); then every block
    // of 8 x rows (in L1) runs over them two rows at a time.
    constexpr int64_t RB = 64;
    thread_local std::vector<float> buf;
    buf.resize(size_t((RB + 1) * K + 16));
    float* wbuf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
    alignas(64) float q[1024];
    auto deq_f32 = [&](int64_t r, float* o) { // s·q + b in float32 (FMA), the values the float32 path uses
        const uint8_t* row = W + r * row_bytes;
        for (int64_t g = 0; g < ng; ++g) {
            const __m512 sv = _mm512_set1_ps(bf16f(scales[r * ng + g])), bv = _mm512_set1_ps(bf16f(biases[r * ng + g]));
            if (bits == 8) {
                for (int j = 0; j < gs; j += 16)
                    _mm512_store_ps(o + g * gs + j,
                                    _mm512_fmadd_ps(sv, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(
                                                            (const __m128i*)(row + g * gs + j)))), bv));
            } else {
                unpack_group(row + g * gs * bits / 8, bits, gs, q);
                for (int j = 0; j < gs; j += 16)
                    _mm512_store_ps(o + g * gs + j, _mm512_fmadd_ps(sv, _mm512_load_ps(q + j), bv));
            }
        }
    };
    for (int64_t c0 = n0; c0 < n1; c0 += RB) {
        const int64_t nr = std::min(RB, n1 - c0);
        for (int64_t r = 0; r < nr; ++r) deq_f32(c0 + r, wbuf + r * K); // K is a multiple of 16: rows stay aligned
        if (nr % 2) std::memcpy(wbuf + nr * K, wbuf + (nr - 1) * K, size_t(K) * 4); // partner of a last odd row
        for (int64_t m0 = 0; m0 < M; m0 += 8) {
            const float* xm = x + m0 * K;
            for (int64_t r = 0; r < nr; r += 2) {
                const float *w0 = wbuf + r * K, *w1 = w0 + K;
                float* ym = y + m0 * ldy + (c0 - n0 + r);
                const bool two = r + 1 < nr;
                switch (std::min<int64_t>(8, M - m0)) {
                case 1: f32_rows2<1>(xm, K, w0, w1, ym, ldy, two); break;
                case 2: f32_rows2<2>(xm, K, w0, w1, ym, ldy, two); break;
                case 3: f32_rows2<3>(xm, K, w0, w1, ym, ldy, two); break;
                case 4: f32_rows2<4>(xm, K, w0, w1, ym, ldy, two); break;
                case 5: f32_rows2<5>(xm, K, w0, w1, ym, ldy, two); break;
                case 6: f32_rows2<6>(xm, K, w0, w1, ym, ldy, two); break;
                case 7: f32_rows2<7>(xm, K, w0, w1, ym, ldy, two); break;
                default: f32_rows2<8>(xm, K, w0, w1, ym, ldy, two); break;
                }
            }
        }
    }
}

bool amx_available() {
    static const bool ok = [] {
        const char* e = std::getenv("QASR_AMX"); // QASR_AMX=0: as on a CPU without tiles (the vector engine, A/B)
        return !(e && !std::strcmp(e, "0")) && request_amx();
    }();
    return ok;
}

bool bf16_gemm_available() {
    static const bool vector_on = [] { // QASR_BF16_VECTOR=0: no vector engine (float32 sgemm there instead, A/B)
        const char* e = std::getenv("QASR_BF16_VECTOR");
        return !(e && !std::strcmp(e, "0"));
    }();
    return amx_available() || (vector_on && avx512_bf16_available() && kernels().isa == Isa::Avx512);
}

bool avx512_bf16_available() {
    static const bool ok = [] {
        unsigned a, b, c, d;
        if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
        return (a & (1u << 5)) != 0; // AVX512_BF16
    }();
    return ok;
}

void f32_to_bf16_rows(const float* in, uint16_t* out, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
        _mm512_storeu_si512(out + i, (__m512i)v);
    }
    for (; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

size_t bf16_packed_x_size(int64_t M, int64_t K) {
    const int64_t Mp = (M + 15) / 16 * 16, Kp = (K + 31) / 32 * 32;
    return size_t(Mp * Kp) + 32; // + 64 bytes: bf16_pack_x aligns the tiles to 64 bytes inside the buffer
}

// Layout: tile (mb, kb) at ((mb * KB) + kb) * 512 uint16; inside, row r (k pair) × 16 m × 2.
void bf16_pack_x(const float* x, int64_t M, int64_t K, uint16_t* out, Bf16PackedX& px) {
    const int64_t Mp = (M + 15) / 16 * 16, Kp = (K + 31) / 32 * 32, KB = Kp / 32;
    out = align64(out);
    px = {out, M, Mp, Kp};
    // Per tile: 16 rows × 32 columns of x rounded to bf16 in registers (16 k-pairs each, zero past M and K), then a
    // 16 × 16 transpose of the 32-bit pairs gives the tile's rows (pair p of the 16 m). Tiles are independent: on
    // the team when there are enough (the callers pack outside their parallel regions; one thread packing 146 × 3072
    // values left the other idle for ~0.1 ms per product).
    const int64_t MB = Mp / 16;
#pragma omp parallel for collapse(2) schedule(static) if (MB >= 2 && Mp * Kp >= 32768)
    for (int64_t mb = 0; mb < MB; ++mb)
        for (int64_t kb = 0; kb < KB; ++kb) {
            const int64_t k0 = kb * 32;
            const int64_t a = std::clamp<int64_t>(K - k0, 0, 16), b = std::clamp<int64_t>(K - k0 - 16, 0, 16);
            const __mmask16 ma = __mmask16((1u << a) - 1u), mb16 = __mmask16((1u << b) - 1u);
            __m512 r[16];
            for (int i = 0; i < 16; ++i) {
                const int64_t m = mb * 16 + i;
                if (m < M) {
                    const float* src = x + m * K + k0;
                    r[i] = (__m512)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(mb16, src + 16), _mm512_maskz_loadu_ps(ma, src));
                } else {
                    r[i] = _mm512_setzero_ps();
                }
            }
            transpose16x16(r);
            uint16_t* t = out + (mb * KB + kb) * 512;
            for (int j = 0; j < 16; ++j) _mm512_store_ps(reinterpret_cast<float*>(t + j * 32), r[j]);
        }
}

void bf16_gemm_rows(const uint16_t* Wt, int64_t ldw, int64_t nb, int64_t n_valid, const Bf16PackedX& px, float* y,
                   int64_t ldy) {
    if (px.Mp <= 32) { // few x rows: each A tile is loaded once, a copy would cost more than it saves
        amx_load_tile_config();
        thread_local std::vector<float> yTv;
        float* yT = aligned_buf(yTv, size_t(nb * px.Mp));
        for (int64_t n0 = 0; n0 < nb; n0 += 32) tile_block(Wt + n0 * ldw, ldw, px, yT + n0 * px.Mp);
        transpose_out(yT, px.Mp, px.M, n_valid, y, ldy);
        return;
    }
    // The weights are copied 256 columns × 32 rows at a time into the aligned L1 buffer of chunked_rows rather than
    // read by the tile loads where they lie: a checkpoint's tensors are rarely 64-byte aligned (8 bytes off in the
    // 0.6B safetensors), and unaligned tile loads cost ~5× as much.
    chunked_rows(n_valid, px.Kp, 256, px, y, ldy, [&](int64_t r, int64_t k0, int64_t kc, uint16_t* dst) {
        const uint16_t* row = Wt + r * ldw + k0;
        const char* nxt = reinterpret_cast<const char*>(row + 32 * ldw);
        for (int64_t o = 0; o < kc * 2; o += 64) _mm_prefetch(nxt + o, _MM_HINT_T0);
        std::memcpy(dst, row, size_t(kc) * 2);
    });
}

} // namespace qasr::cpu
