// ops::linear_multi_rows (ops/vector_ops.hpp): several quantized or bf16 matrices of one input in one pass over the
// thread team. x is packed for the bf16 products (AMX tiles or AVX512-BF16 vectors) once (not once per matrix) and the
// tiles (up to 128 rows, their height balanced over the team: cpu/tiling.hpp) of every matrix form one dynamically
// scheduled list, so the team meets one barrier instead of one per matrix and the last tiles of one
// matrix overlap the first of the next. Each tile runs cpu::bf16_q_gemm_rows or cpu::bf16_gemm_rows as ops::linear
// does, whose rows do not depend on the tiling: the same values as one ops::linear per matrix.
#include "ops/vector_ops.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"
#include "backend/cpu/kernels.hpp"
#ifdef QASR_HAVE_AMX
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/tiling.hpp"
#endif

#include <algorithm>
#include <vector>

namespace qasr::ops {

void linear_multi_rows(const float* x, int64_t M, const WeightMatrix* const* Ws, float* const* ys, size_t count) {
    if (count == 0 || M <= 0) return;
    const int64_t K = Ws[0]->cols;
    bool fused = M > 1;
    for (size_t i = 0; i < count; ++i) {
        if (Ws[i]->cols != K) fail("linear", "linear_multi_rows: matrices differ in input width");
        const WeightMatrix& W = *Ws[i]; // bf16 matrices: whole 32-row blocks, read in place (as ops::linear does)
        fused = fused && ((W.fmt == WFormat::Q && W.group_size % 32 == 0) ||
                          (W.fmt == WFormat::BF16 && K % 32 == 0 && W.rows % 32 == 0));
    }
#ifdef QASR_HAVE_AMX
    if (fused && bf16_gemm_enabled() && cpu::bf16_gemm_available()) {
        struct Tile {
            size_t m;
            int64_t n0, rows;
        };
        std::vector<int64_t> rows;
        for (size_t i = 0; i < count; ++i) rows.push_back(Ws[i]->rows);
        const int64_t nb = cpu::tile_balance_off() ? 128 : cpu::balanced_tile_rows(rows.data(), rows.size(), num_threads(), 128, 32);
        std::vector<Tile> tiles;
        for (size_t i = 0; i < count; ++i)
            for (int64_t n0 = 0; n0 < rows[i]; n0 += nb) tiles.push_back({i, n0, std::min<int64_t>(nb, rows[i] - n0)});
        thread_local std::vector<uint16_t> xbuf;
        xbuf.resize(cpu::bf16_packed_x_size(M, K));
        cpu::Bf16PackedX px;
        cpu::bf16_pack_x(x, M, K, xbuf.data(), px);
        const int nt = int(std::min<int64_t>(num_threads(), int64_t(tiles.size())));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (size_t t = 0; t < tiles.size(); ++t) {
            const WeightMatrix& W = *Ws[tiles[t].m];
            float* y = ys[tiles[t].m] + tiles[t].n0;
            if (W.fmt == WFormat::BF16)
                cpu::bf16_gemm_rows(static_cast<const uint16_t*>(W.data) + tiles[t].n0 * K, K, tiles[t].rows,
                                    tiles[t].rows, px, y, W.rows);
            else
                cpu::bf16_q_gemm_rows(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits,
                                     W.group_size, tiles[t].n0, tiles[t].rows, px, y, W.rows);
        }
        return;
    }
#endif
    for (size_t i = 0; i < count; ++i)
        linear(x, M, *Ws[i], nullptr, ys[i]);
}

void linear_swiglu_rows(const float* x, int64_t M, const WeightMatrix& gate, const WeightMatrix& up, float* h) {
    if (M <= 0) return;
    if (gate.rows != up.rows || gate.cols != up.cols) fail("linear", "linear_swiglu_rows: gate and up differ in shape");
    [[maybe_unused]] const int64_t N = gate.rows, K = gate.cols; // K: the AMX path
#ifdef QASR_HAVE_AMX
    const bool fused = M > 1 && gate.fmt == WFormat::Q && up.fmt == WFormat::Q && gate.bits == up.bits &&
                       gate.group_size == up.group_size && gate.group_size % 32 == 0 && K % gate.group_size == 0;
    if (fused && bf16_gemm_enabled() && cpu::bf16_gemm_available() && cpu::kernels().isa == cpu::Isa::Avx512) {
        thread_local std::vector<uint16_t> xbuf;
        xbuf.resize(cpu::bf16_packed_x_size(M, K));
        cpu::Bf16PackedX px;
        cpu::bf16_pack_x(x, M, K, xbuf.data(), px);
        const cpu::QMatrixRef g{static_cast<const uint8_t*>(gate.data), gate.scales, gate.biases, gate.bits,
                                gate.group_size};
        const cpu::QMatrixRef u{static_cast<const uint8_t*>(up.data), up.scales, up.biases, up.bits, up.group_size};
        // up to 64 rows a tile (each runs both matrices: the work of two such tiles of linear_multi_rows), balanced
        const int64_t nb = cpu::tile_balance_off() ? 64 : cpu::balanced_tile_rows(N, num_threads(), 64, 32);
        const int64_t tiles = (N + nb - 1) / nb;
        const int nt = int(std::min<int64_t>(num_threads(), tiles));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int64_t t = 0; t < tiles; ++t) {
            const int64_t n0 = t * nb;
            cpu::bf16_q_swiglu_rows(g, u, K, n0, std::min<int64_t>(nb, N - n0), px, h + n0, N);
        }
        return;
    }
#endif
    thread_local std::vector<float> ubuf;
    ubuf.resize(size_t(M * N));
    const WeightMatrix* Ws[2] = {&gate, &up};
    float* ys[2] = {h, ubuf.data()};
    linear_multi_rows(x, M, Ws, ys, 2);
    silu_mul_fast(h, ubuf.data(), size_t(M * N));
}

} // namespace qasr::ops
