// AMX bf16 GEMM (compiled with -mamx-tile -mamx-bf16 -mavx512f -mavx512bf16; used only after amx_available()).
// Roles are swapped so that W needs no packing: each C tile is 16 rows of W (the A operand, read straight from
// row-major bf16 weights) times 16 columns of xᵀ (the B operand, x packed once per product into the VNNI pair
// layout: tile (m16, k32) row r holds (x[m][2r], x[m][2r+1]) for the 16 m). C tiles hold yᵀ and are transposed on
// the way out. Blocks of 32 W rows × 32 x rows use all 8 tiles (4 C, 2 A, 2 B).
#include "backend/cpu/amx_gemm.hpp"

#include <immintrin.h>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
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

void load_config() {
    thread_local bool loaded = false;
    if (loaded) return;
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    loaded = true;
}

inline uint16_t bf16_rne(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
    b += 0x7fffu + ((b >> 16) & 1u);
    return uint16_t(b >> 16);
}

#include "backend/cpu/kernels_generic.inc"

} // namespace

void amx_q_to_bf16(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
                   uint16_t* out, int64_t ldo, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * bits / 8, gbytes = int64_t(gs) * bits / 8;
    alignas(64) float q[256];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        uint16_t* o = out + (r - r0) * ldo;
        for (int64_t g = 0; g < ng; ++g) {
            unpack_group(row + g * gbytes, bits, gs, q);
            const __m512 s = _mm512_set1_ps(bf16f(scales[r * ng + g])), b = _mm512_set1_ps(bf16f(biases[r * ng + g]));
            for (int j = 0; j < gs; j += 32) {
                const __m512 lo = _mm512_fmadd_ps(s, _mm512_load_ps(q + j), b);
                const __m512 hi = _mm512_fmadd_ps(s, _mm512_load_ps(q + j + 16), b);
                _mm512_storeu_si512(o + g * gs + j, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
        }
    }
}

bool amx_available() {
    static const bool ok = request_amx();
    return ok;
}

void amx_f32_to_bf16(const float* in, uint16_t* out, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(in + i + 16), _mm512_loadu_ps(in + i));
        _mm512_storeu_si512(out + i, (__m512i)v);
    }
    for (; i < n; ++i) out[i] = bf16_rne(in[i]);
}

size_t amx_packed_x_size(int64_t M, int64_t K) {
    const int64_t Mp = (M + 31) / 32 * 32, Kp = (K + 31) / 32 * 32;
    return size_t(Mp * Kp);
}

// Layout: tile (mb, kb) at ((mb * KB) + kb) * 512 uint16; inside, row r (k pair) × 16 m × 2. x is rounded to
// bf16 row by row (vector), then each tile is a 16×16 transpose of 32-bit (k-pair) units.
void amx_pack_x(const float* x, int64_t M, int64_t K, uint16_t* out, AmxPackedX& px) {
    const int64_t Mp = (M + 31) / 32 * 32, Kp = (K + 31) / 32 * 32, KB = Kp / 32;
    px = {out, M, Mp, Kp};
    thread_local std::vector<uint32_t> rows; // bf16 rows of x as k-pairs, [Mp, Kp/2]
    rows.resize(size_t(Mp * Kp / 2));
    std::fill(rows.begin() + M * Kp / 2, rows.end(), 0u); // padding rows; the others are overwritten
    thread_local std::vector<uint16_t> tmp;
    tmp.assign(size_t(Kp), 0);
    for (int64_t m = 0; m < M; ++m) {
        amx_f32_to_bf16(x + m * K, tmp.data(), size_t(K));
        std::memcpy(rows.data() + m * Kp / 2, tmp.data(), size_t(Kp) * 2);
    }
    for (int64_t mb = 0; mb < Mp / 16; ++mb)
        for (int64_t kb = 0; kb < KB; ++kb) {
            uint32_t t[256];
            const uint32_t* src = rows.data() + mb * 16 * (Kp / 2) + kb * 16;
            for (int c = 0; c < 16; ++c)
                for (int r = 0; r < 16; ++r) t[r * 16 + c] = src[c * (Kp / 2) + r];
            std::memcpy(out + (mb * KB + kb) * 512, t, sizeof(t));
        }
}

void amx_gemm_rows(const uint16_t* Wt, int64_t ldw, int64_t nb, int64_t n_valid, const AmxPackedX& px, float* y,
                   int64_t ldy) {
    load_config();
    const int64_t KB = px.Kp / 32, Mp = px.Mp;
    // C tiles (yᵀ blocks) are stored straight into yT [nb, Mp]; one transpose at the end.
    thread_local std::vector<float> yT;
    yT.resize(size_t(nb * Mp));
    for (int64_t n0 = 0; n0 < nb; n0 += 32) {
        const uint16_t* a0 = Wt + n0 * ldw;
        const uint16_t* a1 = Wt + (n0 + 16) * ldw;
        for (int64_t m0 = 0; m0 < Mp; m0 += 32) {
            const uint16_t* b0 = px.data + (m0 / 16) * KB * 512;
            const uint16_t* b1 = px.data + (m0 / 16 + 1) * KB * 512;
            _tile_zero(0);
            _tile_zero(1);
            _tile_zero(2);
            _tile_zero(3);
            for (int64_t kb = 0; kb < KB; ++kb) {
                _tile_loadd(4, a0 + kb * 32, ldw * 2);
                _tile_loadd(5, a1 + kb * 32, ldw * 2);
                _tile_loadd(6, b0 + kb * 512, 64);
                _tile_loadd(7, b1 + kb * 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                _tile_dpbf16ps(2, 5, 6);
                _tile_dpbf16ps(3, 5, 7);
            }
            float* c = yT.data() + n0 * Mp + m0;
            _tile_stored(0, c, Mp * 4);
            _tile_stored(1, c + 16, Mp * 4);
            _tile_stored(2, c + 16 * Mp, Mp * 4);
            _tile_stored(3, c + 16 * Mp + 16, Mp * 4);
        }
    }
    // y[m, n] = yT[n, m] in 16×16 blocks.
    const int64_t M = px.M;
    for (int64_t n0 = 0; n0 < n_valid; n0 += 16)
        for (int64_t m0 = 0; m0 < M; m0 += 16) {
            const int64_t n1 = std::min(n_valid, n0 + 16), m1 = std::min(M, m0 + 16);
            for (int64_t m = m0; m < m1; ++m)
                for (int64_t n = n0; n < n1; ++n) y[m * ldy + n] = yT[size_t(n * Mp + m)];
        }
}

} // namespace qasr::cpu
