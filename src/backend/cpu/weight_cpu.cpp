// WeightMatrix helpers and ops::linear on WeightMatrix: matrix-vector products (decode, M = 1) run the fused
// per-ISA kernels over row blocks on all threads; matrix-matrix products (prefill, encoder) run the bf16 engines
// where enabled, else the table's own kernel (AVX2: gemm_avx2.cpp), else expand tiles of W to float32 in a scratch
// buffer and hand them to sgemm (OpenBLAS) or the portable kernel.
#include "backend/cpu/bf16_gemm.hpp"
#include "backend/cpu/gemv.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/tiling.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "ops/weight.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef QASR_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace qasr {

size_t WeightMatrix::bytes() const {
    const size_t n = size_t(rows) * size_t(cols);
    switch (fmt) {
    case WFormat::F32: return n * 4;
    case WFormat::BF16: return n * 2;
    case WFormat::Q: return n * size_t(bits) / 8 + 2 * 2 * n / size_t(group_size);
    }
    return 0;
}

const char* WeightMatrix::format_name() const {
    switch (fmt) {
    case WFormat::F32: return "f32";
    case WFormat::BF16: return "bf16";
    case WFormat::Q: return bits == 4 ? "q4" : bits == 6 ? "q6" : bits == 8 ? "q8" : "q";
    }
    return "?";
}

void WeightMatrix::row_f32(int64_t r, float* out) const {
    if (r < 0 || r >= rows) fail("weights", "row " + std::to_string(r) + " outside [0, " + std::to_string(rows) + ")");
    const auto& k = cpu::portable_kernels();
    switch (fmt) {
    case WFormat::F32: std::memcpy(out, static_cast<const float*>(data) + r * cols, size_t(cols) * 4); break;
    case WFormat::BF16: k.bf16_to_f32(static_cast<const uint16_t*>(data) + r * cols, out, size_t(cols)); break;
    case WFormat::Q:
        k.q_dequant(static_cast<const uint8_t*>(data), scales, biases, cols, bits, group_size, out, r, r + 1);
        break;
    }
}

std::vector<float> WeightMatrix::to_f32() const {
    std::vector<float> v(size_t(rows) * size_t(cols));
    for (int64_t r = 0; r < rows; ++r) row_f32(r, v.data() + r * cols);
    return v;
}

WeightMatrix WeightMatrix::from_f32(std::vector<float> values, int64_t r, int64_t c) {
    if (values.size() != size_t(r) * size_t(c)) fail("weights", "from_f32: size does not match the shape");
    auto store = std::make_shared<std::vector<float>>(std::move(values));
    WeightMatrix w;
    w.fmt = WFormat::F32;
    w.rows = r;
    w.cols = c;
    w.data = store->data();
    w.owner = store;
    return w;
}

WeightMatrix WeightMatrix::from_tensor(Tensor t) {
    if (t.shape.size() != 2) fail("weights", "a weight matrix must be 2-D, got " + shape_str(t.shape));
    const int64_t r = t.shape[0], c = t.shape[1];
    return from_f32(std::move(t.data), r, c);
}

namespace cpu {

void RowShares::init(int64_t N, int nt, int64_t blocks_per_thread) {
    nt = std::max(1, nt);
    N_ = N;
    per_ = std::max<int64_t>(16, (N / (int64_t(nt) * std::max<int64_t>(1, blocks_per_thread)) + 15) / 16 * 16);
    const int64_t blocks = (N + per_ - 1) / per_;
    nt_ = int(std::max<int64_t>(1, std::min<int64_t>(nt, blocks)));
    if (nt_ > cap_) {
        shares_.reset(new Share[size_t(nt_)]);
        cap_ = nt_;
    }
    for (int t = 0; t < nt_; ++t) {
        const uint64_t lo = uint64_t(blocks * t / nt_), hi = uint64_t(blocks * (t + 1) / nt_);
        shares_[size_t(t)].range.store(lo | hi << 32, std::memory_order_relaxed);
    }
}

int64_t RowShares::take_own(int t, int64_t& end) {
    std::atomic<uint64_t>& a = shares_[size_t(t)].range;
    uint64_t r = a.load(std::memory_order_relaxed);
    while (uint32_t(r) < uint32_t(r >> 32)) {
        const uint32_t k = std::max<uint32_t>(1, std::min<uint32_t>(4, (uint32_t(r >> 32) - uint32_t(r)) / 4));
        if (a.compare_exchange_weak(r, r + k, std::memory_order_relaxed)) {
            end = int64_t(uint32_t(r)) + k;
            return int64_t(uint32_t(r));
        }
    }
    return -1;
}

int64_t RowShares::steal() {
    for (;;) { // from the back of the share with the most blocks left
        int victim = -1;
        uint64_t left = 0;
        for (int u = 0; u < nt_; ++u) {
            const uint64_t r = shares_[size_t(u)].range.load(std::memory_order_relaxed);
            const uint64_t n = uint32_t(r >> 32) > uint32_t(r) ? uint32_t(r >> 32) - uint32_t(r) : 0;
            if (n > left) left = n, victim = u;
        }
        if (victim < 0) return -1;
        std::atomic<uint64_t>& a = shares_[size_t(victim)].range;
        uint64_t r = a.load(std::memory_order_relaxed);
        while (uint32_t(r) < uint32_t(r >> 32))
            if (a.compare_exchange_weak(r, r - (uint64_t(1) << 32), std::memory_order_relaxed))
                return int64_t(uint32_t(r >> 32)) - 1;
    }
}

void GemvInput::prepare(const KernelTable& k, const float* xin, const WeightMatrix* const* Ws, size_t n) {
    x = xin;
    slot.assign(n, -1);
    size_t used = 0;
    for (size_t i = 0; i < n; ++i) {
        const WeightMatrix& W = *Ws[i];
        if (W.fmt != WFormat::Q) continue;
        for (size_t j = 0; j < i && slot[i] < 0; ++j) // matrices with the same layout share one prepared x
            if (slot[j] >= 0 && Ws[j]->bits == W.bits && Ws[j]->group_size == W.group_size) slot[i] = slot[j];
        if (slot[i] >= 0) continue;
        if (xp.size() <= used) xp.resize(used + 1), xs.resize(used + 1);
        xp[used].resize(size_t(W.cols));
        xs[used].resize(size_t(W.cols / W.group_size));
        k.q_prep(x, W.cols, W.bits, W.group_size, xp[used].data(), xs[used].data());
        slot[i] = int(used++);
    }
}

void gemv_rows(const KernelTable& k, const GemvInput& in, size_t i, const WeightMatrix& W, float* y, int64_t r0,
               int64_t r1) {
    const int64_t K = W.cols;
    switch (W.fmt) {
    case WFormat::F32: k.f32_gemv(static_cast<const float*>(W.data), K, in.x, y, r0, r1); break;
    case WFormat::BF16: k.bf16_gemv(static_cast<const uint16_t*>(W.data), K, in.x, y, r0, r1); break;
    case WFormat::Q: {
        const size_t s = size_t(in.slot[i]);
        k.q_gemv(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits, W.group_size, in.xp[s].data(),
                 in.xs[s].data(), y, r0, r1);
        break;
    }
    }
}

void gemv_multi_rows(const KernelTable& k, const GemvInput& in, const WeightMatrix* const* Ws, float* const* ys,
                     size_t n, int64_t a, int64_t b) {
    int64_t start = 0;
    for (size_t i = 0; i < n && start < b; start += Ws[i]->rows, ++i) {
        const int64_t r0 = std::max(a, start) - start, r1 = std::min(b, start + Ws[i]->rows) - start;
        if (r0 < r1) gemv_rows(k, in, i, *Ws[i], ys[i], r0, r1);
    }
}

namespace {

// Rows [r0, r1) of matrix i for inputs in[0 … nb), outputs y[0 … nb).
void gemv_rows_batch(const KernelTable& k, const GemvInput* in, int nb, size_t i, const WeightMatrix& W,
                     float* const* y, int64_t r0, int64_t r1) {
    for (int b0 = 0; b0 < nb; b0 += kMaxMulti) {
        const int m = std::min(kMaxMulti, nb - b0);
        const float* xa[kMaxMulti];
        const float* xb[kMaxMulti];
        bool done = false;
        if (m > 1 && W.fmt == WFormat::BF16 && k.bf16_gemv_multi) {
            for (int j = 0; j < m; ++j) xa[j] = in[b0 + j].x;
            k.bf16_gemv_multi(static_cast<const uint16_t*>(W.data), W.cols, xa, m, y + b0, r0, r1);
            done = true;
        } else if (m > 1 && W.fmt == WFormat::Q && k.q_gemv_multi) {
            for (int j = 0; j < m; ++j) {
                const size_t s = size_t(in[b0 + j].slot[i]);
                xa[j] = in[b0 + j].xp[s].data();
                xb[j] = in[b0 + j].xs[s].data();
            }
            done = k.q_gemv_multi(static_cast<const uint8_t*>(W.data), W.scales, W.biases, W.cols, W.bits,
                                  W.group_size, xa, xb, m, y + b0, r0, r1);
        }
        if (!done)
            for (int j = 0; j < m; ++j) gemv_rows(k, in[b0 + j], i, W, y[b0 + j], r0, r1);
    }
}

} // namespace

void gemv_multi_rows_batch(const KernelTable& k, const GemvInput* in, int nb, const WeightMatrix* const* Ws,
                           float* const* Y, size_t n, int64_t a, int64_t b) {
    thread_local std::vector<float*> yb;
    yb.resize(static_cast<size_t>(nb));
    int64_t start = 0;
    for (size_t i = 0; i < n && start < b; start += Ws[i]->rows, ++i) {
        const int64_t r0 = std::max(a, start) - start, r1 = std::min(b, start + Ws[i]->rows) - start;
        if (r0 >= r1) continue;
        for (int j = 0; j < nb; ++j) yb[size_t(j)] = Y[i] + int64_t(j) * Ws[i]->rows;
        gemv_rows_batch(k, in, nb, i, *Ws[i], yb.data(), r0, r1);
    }
}

} // namespace cpu

namespace ops {
namespace {

// Runs fn(r0, r1) over row blocks of [0, N) on the OpenMP team (cpu::RowShares: contiguous shares with
// stealing); one thread when the work is too small to pay for the fork/join.
constexpr int64_t kMinParallelWork = 32768; // rows × width below which one thread does it all
template <typename F> void parallel_rows(int64_t N, int64_t work_per_row, F fn) {
    int nt = num_threads();
    if (int64_t(N) * work_per_row < kMinParallelWork) nt = 1;
    if (nt <= 1) return fn(int64_t(0), N);
    thread_local cpu::RowShares shares; // the caller's; workers see it through the reference
    cpu::RowShares& sh = shares;
    sh.init(N, nt, 8);
#pragma omp parallel num_threads(sh.threads())
    sh.run(omp_get_thread_num(), fn);
}

// Several matrix-vector products with the same x in one parallel region (the rows of all matrices are one
// index space), so q/k/v and gate/up cost one fork/join each.
void gemv_multi(const float* x, const std::vector<std::pair<const WeightMatrix*, float*>>& mats) {
    const cpu::KernelTable& k = cpu::kernels();
    const int64_t K = mats[0].first->cols;
    std::vector<const WeightMatrix*> Ws;
    std::vector<float*> ys;
    int64_t total = 0;
    for (const auto& [W, y] : mats) {
        if (W->cols != K) fail("linear", "gemv_multi: matrices differ in input width");
        Ws.push_back(W);
        ys.push_back(y);
        total += W->rows;
    }
    thread_local cpu::GemvInput input_store; // the caller's; workers see it through `in`
    cpu::GemvInput& in = input_store;
    in.prepare(k, x, Ws.data(), Ws.size());
    parallel_rows(total, K, [&](int64_t a, int64_t b) { cpu::gemv_multi_rows(k, in, Ws.data(), ys.data(), Ws.size(), a, b); });
}

void gemv(const float* x, const WeightMatrix& W, float* y) { gemv_multi(x, {{&W, y}}); }

} // namespace

void gemv_batch(const float* x, int64_t B, const WeightMatrix& W, float* y) {
    if (B <= 0 || W.rows <= 0) return;
    if (B == 1) return gemv(x, W, y);
    const cpu::KernelTable& k = cpu::kernels();
    const WeightMatrix* Ws[1] = {&W};
    thread_local std::vector<cpu::GemvInput> input_store; // the caller's; workers see it through `in`
    std::vector<cpu::GemvInput>& in = input_store;
    if (in.size() < size_t(B)) in.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) in[size_t(b)].prepare(k, x + b * W.cols, Ws, 1);
    // Sub-blocks of ~32 KB of weights, multiplied with every row while they are in the cache (the kernels' row
    // results do not depend on where a block starts).
    const int64_t row_bytes = std::max<int64_t>(1, int64_t(W.bytes()) / W.rows);
    const int64_t sub = std::max<int64_t>(16, (32768 / row_bytes) & ~int64_t(15));
    parallel_rows(W.rows, W.cols * B, [&](int64_t a, int64_t e) {
        for (int64_t r0 = a; r0 < e; r0 += sub)
            cpu::gemv_multi_rows_batch(k, in.data(), int(B), Ws, &y, 1, r0, std::min(e, r0 + sub));
    });
}

namespace {

// y[:, 0:nb] (row stride ldy) = x · T[nb, K]ᵀ on the calling thread.
void gemm_tile(const float* x, int64_t M, int64_t K, const float* T, int64_t nb, float* y, int64_t ldy) {
#ifdef QASR_HAVE_OPENBLAS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), int(nb), int(K), 1.0f, x, int(K), T, int(K), 0.0f, y,
                int(ldy));
#else
    thread_local std::vector<float> tmp;
    tmp.resize(size_t(M * nb));
    linear_portable_serial(x, M, K, T, nb, tmp.data());
    for (int64_t m = 0; m < M; ++m) std::memcpy(y + m * ldy, tmp.data() + m * nb, size_t(nb) * 4);
#endif
}

} // namespace

// Matrix-matrix product: the N output columns are split into tiles of rows of W (~512 KB of float32 each, a
// multiple of 16 rows) handed out to the OpenMP team; each thread expands its tile (bf16 / quantized → float32,
// in its own scratch buffer, L2-resident) and runs a single-threaded sgemm on it. OpenBLAS itself runs with one
// thread: its own pool would fight the OpenMP team for the cores.
namespace {

int env_gemm_mode() { // -1: QASR_GEMM=f32, 1: QASR_GEMM=bf16, 0: as the model asks
    static const int mode = [] {
        const char* e = std::getenv("QASR_GEMM");
        if (!e || !*e) return 0;
        if (!std::strcmp(e, "f32")) return -1;
        if (!std::strcmp(e, "bf16")) return 1;
        fail("cpu", std::string("QASR_GEMM=") + e + ": expected f32 or bf16");
    }();
    return mode;
}
thread_local bool t_bf16 = false;

bool packed_gemm_off() { // QASR_PACKED_GEMM=0: tiles of W as float32 through sgemm even where the table has gemm_rows (A/B)
    static const bool off = std::getenv("QASR_PACKED_GEMM") && !std::strcmp(std::getenv("QASR_PACKED_GEMM"), "0");
    return off;
}

#ifdef QASR_HAVE_AMX
void bf16_gemm(const float* x, int64_t M, const WeightMatrix& W, float* y) {
    const int64_t N = W.rows, K = W.cols, Kp = (K + 31) / 32 * 32;
    thread_local std::vector<uint16_t> xbuf;
    xbuf.resize(cpu::bf16_packed_x_size(M, K));
    cpu::Bf16PackedX px;
    cpu::bf16_pack_x(x, M, K, xbuf.data(), px);
    // up to 128 rows a tile, balanced over the team (cpu/tiling.hpp: N = 896 on 2 threads → 64, 1024 on 16 → 64)
    const int64_t nbt = cpu::tile_balance_off() ? ((N + 127) / 128 >= 4 * int64_t(num_threads()) ? 128 : 64)
                                                : cpu::balanced_tile_rows(N, num_threads(), 128, 32);
    const int64_t tiles = (N + nbt - 1) / nbt;
    const int nt = int(std::min<int64_t>(num_threads(), tiles));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t n0 = t * nbt, rows = std::min(N, n0 + nbt) - n0, nb = (rows + 31) / 32 * 32;
        if (W.fmt == WFormat::BF16 && K == Kp && rows == nb) {
            cpu::bf16_gemm_rows(static_cast<const uint16_t*>(W.data) + n0 * K, K, nb, rows, px, y + n0, N);
            continue;
        }
        if (W.fmt == WFormat::Q) { // dequantized 32 rows at a time, inside the kernel
            cpu::bf16_q_gemm_rows(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits, W.group_size, n0,
                                 rows, px, y + n0, N);
            continue;
        }
        thread_local std::vector<uint16_t> wb;
        wb.resize(size_t(nb * Kp));
        if (Kp != K)
            for (int64_t r = 0; r < rows; ++r) std::fill(wb.data() + r * Kp + K, wb.data() + (r + 1) * Kp, uint16_t(0));
        std::fill(wb.data() + rows * Kp, wb.data() + nb * Kp, uint16_t(0));
        if (W.fmt == WFormat::BF16) {
            for (int64_t r = 0; r < rows; ++r)
                std::memcpy(wb.data() + r * Kp, static_cast<const uint16_t*>(W.data) + (n0 + r) * K, size_t(K) * 2);
        } else {
            const float* src = static_cast<const float*>(W.data) + n0 * K;
            for (int64_t r = 0; r < rows; ++r) cpu::f32_to_bf16_rows(src + r * K, wb.data() + r * Kp, size_t(K));
        }
        cpu::bf16_gemm_rows(wb.data(), Kp, nb, rows, px, y + n0, N);
    }
}
#endif

} // namespace

constexpr int64_t kSmallRowsF32 = 32;  // up to this many x rows: q_gemm_f32_rows (crossover with sgemm ~24–40 rows for
                                        // the 0.6B head, bench/gemm_bench head_f32_ms with QASR_ISA=avx512 vs avx2)
constexpr int64_t kSmallRowsTile = 256; // W rows per task

bool bf16_gemm_enabled() {
    const int e = env_gemm_mode();
    return e > 0 || (e == 0 && t_bf16);
}

const char* bf16_gemm_engine() {
#ifdef QASR_HAVE_AMX
    if (cpu::amx_available()) return "amx";
    if (cpu::bf16_gemm_available()) return "avx512-bf16";
#endif
    return "none";
}

const char* f32_gemm_engine() {
    if (cpu::kernels().gemm_rows && !packed_gemm_off()) return cpu::kernels().name;
#ifdef QASR_HAVE_OPENBLAS
    return "sgemm";
#else
    return "portable";
#endif
}

Bf16GemmScope::Bf16GemmScope(bool on) : prev_(t_bf16) { t_bf16 = on; }
Bf16GemmScope::~Bf16GemmScope() { t_bf16 = prev_; }

void gemm(const float* x, int64_t M, const WeightMatrix& W, float* y) {
    const int64_t N = W.rows, K = W.cols;
#ifdef QASR_HAVE_AMX
    if (bf16_gemm_enabled() && cpu::bf16_gemm_available()) return bf16_gemm(x, M, W, y);
#endif
    const cpu::KernelTable& k = cpu::kernels();
#ifdef QASR_HAVE_AMX
    // Few rows of x against a quantized matrix (e.g. the LM head over draft rows): dequantize each row of W once
    // and multiply it with every x row in registers, instead of expanding tiles for sgemm (a fixed cost of several
    // weight reads). Same float32 values; the AVX-512 table only (QASR_ISA=portable|avx2 keep sgemm).
    if (W.fmt == WFormat::Q && M <= kSmallRowsF32 && k.isa == cpu::Isa::Avx512 && W.group_size % 16 == 0) {
        const int64_t tiles = (N + kSmallRowsTile - 1) / kSmallRowsTile;
        const int nt = int(std::min<int64_t>(num_threads(), tiles));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
        for (int64_t t = 0; t < tiles; ++t) {
            const int64_t n0 = t * kSmallRowsTile, n1 = std::min(N, n0 + kSmallRowsTile);
            cpu::q_gemm_f32_rows(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits, W.group_size, n0,
                                 n1, x, M, y + n0, N);
        }
        return;
    }
#endif
    // The table's own matrix-matrix kernel (AVX2: gemm_avx2.cpp), W converted straight into its panels: tiles of up
    // to 512 rows (multiples of 16), balanced over the team; a row's values do not depend on the tiling. A tile reads
    // all of x once per 256-column block of k, so tall tiles read it less often (Zen 2, 2 threads, all 0.6B decoder
    // matrices at 158 rows: 1007–1019 ms with 128-row tiles, 898–908 with 512; 64 rows 399 → 390, 8 rows 138 → 129).
    if (k.gemm_rows && !packed_gemm_off()) {
        cpu::MatrixRef ref;
        ref.fmt = W.fmt == WFormat::F32 ? cpu::MatrixRef::F32 : W.fmt == WFormat::BF16 ? cpu::MatrixRef::BF16 : cpu::MatrixRef::Q;
        ref.data = W.data, ref.scales = W.scales, ref.biases = W.biases, ref.K = K, ref.bits = W.bits, ref.gs = W.group_size;
        const int64_t nb = cpu::balanced_tile_rows(N, num_threads(), 512, 16);
        const int64_t tiles = (N + nb - 1) / nb;
        const int nt = int(std::min<int64_t>(num_threads(), tiles));
        // Rows of x a multiple of 4 KB apart (K = 1024, 2048, 3072: every decoder product) put the micro-kernel's 6
        // rows on one L1 set and its loads on 4K-aliasing stalls: they are copied 64 bytes further apart first
        // (Zen 2, one core, 158 × 1024 × 2048: 83 → 88 GFLOP/s; the copy is ~1 % of the product).
        const bool pad = K % 1024 == 0;
        const int64_t ldx = pad ? K + 16 : K;
        thread_local std::vector<float> xpad_store; // the caller's; workers see it through xp
        float* xp = nullptr;
        if (pad) {
            xpad_store.resize(size_t(M * ldx));
            xp = xpad_store.data();
        }
#pragma omp parallel num_threads(nt)
        {
            if (pad) {
#pragma omp for schedule(static)
                for (int64_t m = 0; m < M; ++m) std::memcpy(xp + m * ldx, x + m * K, size_t(K) * sizeof(float));
            }
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < tiles; ++t)
                k.gemm_rows(pad ? xp : x, ldx, M, ref, t * nb, std::min(N, (t + 1) * nb), y, N);
        }
        return;
    }
    // Tiles of up to 2 MB of float32 (a multiple of 16 rows), and at least 2 per thread. sgemm packs all of x for
    // every tile, so small tiles repack x over and over (with 512 KB tiles a K = 3584 matrix had 32-row tiles: x
    // packed 28 times; sgemm_oncopy was 13 % of the prefill's profile). Zen 2, 2 threads, 0.6B, 11 s: encoder 1130 →
    // 930 ms, prefill 1185 → 1150 ms against 512 KB tiles (4 MB tiles: slower again). QASR_TILE=floats: A/B.
    static const int64_t tile_floats = std::getenv("QASR_TILE") ? std::atoll(std::getenv("QASR_TILE")) : (int64_t(1) << 19);
    const int64_t per_thread = (N + 2 * num_threads() - 1) / (2 * num_threads());
    const int64_t nb = std::max<int64_t>(16, std::min({(N + 15) / 16 * 16, tile_floats / K / 16 * 16, (per_thread + 15) / 16 * 16}));
    const int64_t tiles = (N + nb - 1) / nb;
    const int nt = int(std::min<int64_t>(num_threads(), tiles));
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t n0 = t * nb, n1 = std::min(N, n0 + nb);
        const float* T;
        thread_local std::vector<float> tile;
        if (W.fmt == WFormat::F32) {
            T = static_cast<const float*>(W.data) + n0 * K;
        } else {
            tile.resize(size_t(nb * K));
            if (W.fmt == WFormat::BF16)
                k.bf16_to_f32(static_cast<const uint16_t*>(W.data) + n0 * K, tile.data(), size_t((n1 - n0) * K));
            else
                k.q_dequant(static_cast<const uint8_t*>(W.data), W.scales, W.biases, K, W.bits, W.group_size,
                            tile.data(), n0, n1);
            T = tile.data();
        }
        gemm_tile(x, M, K, T, n1 - n0, y + n0, N);
    }
}

void linear(const float* x, int64_t M, const WeightMatrix& W, const float* bias, float* y) {
    if (M <= 0 || W.rows <= 0) return;
    const int64_t N = W.rows;
    if (M == 1) gemv(x, W, y);
    else gemm(x, M, W, y);
    if (bias)
        for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) y[m * N + n] += bias[n];
}

void linear_multi(const Tensor& x, const std::vector<const WeightMatrix*>& Ws, const std::vector<Tensor*>& ys) {
    std::vector<std::pair<const WeightMatrix*, float*>> mats;
    for (size_t i = 0; i < Ws.size(); ++i) {
        if (x.cols() != Ws[i]->cols)
            fail("linear", "input width " + std::to_string(x.cols()) + " != weight " + shape_str(Ws[i]->shape()));
        *ys[i] = Tensor({x.rows(), Ws[i]->rows});
        mats.emplace_back(Ws[i], ys[i]->ptr());
    }
    if (x.rows() == 1) return gemv_multi(x.ptr(), mats);
    for (const auto& [W, y] : mats) gemm(x.ptr(), x.rows(), *W, y);
}

Tensor linear(const Tensor& x, const WeightMatrix& W, const Tensor* bias) {
    if (x.cols() != W.cols)
        fail("linear", "input width " + std::to_string(x.cols()) + " != weight " + shape_str(W.shape()));
    Tensor y({x.rows(), W.rows});
    linear(x.ptr(), x.rows(), W, bias && !bias->data.empty() ? bias->ptr() : nullptr, y.ptr());
    return y;
}

} // namespace ops
} // namespace qasr
