// Building blocks of the CPU matrix-vector products, shared by ops::linear (one parallel region per product) and
// the fused decode step (backend/cpu/decode_step_cpu.cpp: all products of a step inside one parallel region).
#pragma once
#include "backend/cpu/kernels.hpp"
#include "ops/weight.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace qasr::cpu {

// Row blocks of [0, N) for a team of nt threads. Each thread owns one contiguous share of the rows and walks it
// front to back in blocks, so it streams one long contiguous range of the weights (short interleaved blocks
// restart the hardware prefetchers at every block); a thread that is done steals blocks from the back of the
// share with the most left, so one that loses its core for a while does not hold up the others. Every row is
// handed out exactly once, whichever threads of the team (or fewer) call run(). The owner takes up to 4 blocks (a
// quarter of what is left) at a time, a thief one. The fused decode step uses many small blocks (a thread that
// finishes early waits for at most one block of the others at the barrier after the product: with 8 blocks per
// thread that wait was ≈10 µs per product on the 0.6B decode, ≈1.4 ms per token); a standalone product
// (ops::linear) keeps 8 per thread (with small blocks the products alone, qasr bench's matvec_ms_per_token, ran
// slower in all 5 rounds of an interleaved A/B: +1–19% on a noisy machine).
class RowShares {
public:
    RowShares() = default;
    RowShares(const RowShares&) = delete;
    RowShares& operator=(const RowShares&) = delete;
    // (Re)initializes for N rows and nt threads, about blocks_per_thread blocks (≥ 16 rows) per share; not
    // concurrently with run().
    void init(int64_t N, int nt, int64_t blocks_per_thread);
    int threads() const { return nt_; }
    // Thread t of the team runs fn(r0, r1) on blocks of its share, then on stolen ones, until none is left.
    template <typename F> void run(int t, F&& fn) {
        int64_t b, e;
        if (t < nt_)
            while ((b = take_own(t, e)) >= 0) fn(b * per_, std::min(N_, e * per_));
        while ((b = steal()) >= 0) fn(b * per_, std::min(N_, (b + 1) * per_));
    }

private:
    struct alignas(64) Share {
        std::atomic<uint64_t> range; // blocks [lo, hi) as lo | hi << 32: the owner takes lo, thieves take hi
    };
    int64_t take_own(int t, int64_t& end);
    int64_t steal();
    std::unique_ptr<Share[]> shares_;
    int cap_ = 0, nt_ = 0;
    int64_t N_ = 0, per_ = 1;
};

// x prepared for the matrices that read it: the quantized kernels' int16/reordered copy and group sums (one per
// distinct (bits, group size) among the matrices; float32 and bf16 matrices read x itself).
struct GemvInput {
    const float* x = nullptr;
    std::vector<std::vector<float>> xp, xs; // per matrix: empty, or the prepared buffers (shared layouts copied)
    std::vector<int> slot;                  // matrix i reads preparation slot[i]
    // Prepares x [K] for the matrices Ws (all of width K) on the calling thread.
    void prepare(const KernelTable& k, const float* x, const WeightMatrix* const* Ws, size_t n);
};

// Rows [r0, r1) of y = W·x for one matrix of `in`'s i-th matrix.
void gemv_rows(const KernelTable& k, const GemvInput& in, size_t i, const WeightMatrix& W, float* y, int64_t r0,
               int64_t r1);

// Rows of several matrices (sharing their input) as one index space [0, Σ rows): the block [a, b) of it.
void gemv_multi_rows(const KernelTable& k, const GemvInput& in, const WeightMatrix* const* Ws, float* const* ys,
                     size_t n, int64_t a, int64_t b);

// The same for nb inputs in[0 … nb) at once (a batched decode step): matrix i's output for input b is
// Y[i] + b·rows(i). Each block of weights is read once for up to kMaxMulti inputs (the tables' *_multi kernels;
// the single-input kernel per input otherwise); every input's results are bit for bit gemv_multi_rows'.
void gemv_multi_rows_batch(const KernelTable& k, const GemvInput* in, int nb, const WeightMatrix* const* Ws,
                           float* const* Y, size_t n, int64_t a, int64_t b);

} // namespace qasr::cpu
