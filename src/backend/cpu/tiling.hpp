// How the matrix products deal their output rows out to the OpenMP team: the tile height that keeps the busiest
// thread's share smallest. With a fixed 128-row tile a 1024-row matrix is 8 tiles, so on 16 threads half the team
// idled through the attention output and down projections (H100 machine's 16-core Xeon, AMX: those two took as
// long as on 8 threads). Products whose rows do not depend on the tiling (the bf16 engines) give the same values
// whatever height is chosen.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace qasr::cpu {

// The height (a multiple of `step`, at most `max_rows`) for matrices of the given row counts, tiled separately and
// dealt out together to `threads` threads as the dynamic schedule does (each tile, in order, to the thread with the
// least work): the height whose busiest thread ends with the fewest rows, ties to the taller tile (fewer tiles: less
// per-tile work such as reading x again).
inline int64_t balanced_tile_rows(const int64_t* rows, size_t count, int threads, int64_t max_rows, int64_t step) {
    if (threads < 1) threads = 1;
    int64_t tallest = 0; // tiles of the tallest height; with 8 or more per thread any imbalance is small (an LM head)
    for (size_t i = 0; i < count; ++i) tallest += (rows[i] + max_rows - 1) / max_rows;
    if (tallest >= 8 * int64_t(threads)) return max_rows;
    std::vector<int64_t> load(static_cast<size_t>(threads), 0);
    int64_t best = step, cost = INT64_MAX;
    for (int64_t nb = step; nb <= max_rows; nb += step) {
        std::fill(load.begin(), load.end(), 0);
        for (size_t i = 0; i < count; ++i)
            for (int64_t r0 = 0; r0 < rows[i]; r0 += nb)
                *std::min_element(load.begin(), load.end()) += std::min(nb, rows[i] - r0);
        const int64_t c = *std::max_element(load.begin(), load.end());
        if (c <= cost) cost = c, best = nb;
    }
    return best;
}
inline int64_t balanced_tile_rows(int64_t rows, int threads, int64_t max_rows, int64_t step) {
    return balanced_tile_rows(&rows, 1, threads, max_rows, step);
}

// QASR_TILE_BALANCE=0 (A/B only): the callers use their fixed heights of before.
inline bool tile_balance_off() {
    static const bool off = std::getenv("QASR_TILE_BALANCE") && !std::strcmp(std::getenv("QASR_TILE_BALANCE"), "0");
    return off;
}

} // namespace qasr::cpu
