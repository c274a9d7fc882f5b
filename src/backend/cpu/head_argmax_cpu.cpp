// Greedy choice over several hidden rows under a quantized LM head, screened with the AMX bf16 product and
// rescored exactly (see ops::head_argmax in ops/ops.hpp).
//
// Exact values: L_j = the float32 dot product of x with row j of the head dequantized to float32 (s·q + b), as
// cpu::q_gemm_f32_rows computes it (per row, independent of how many rows it runs together). Screen: L̃_j = the
// AMX product of bf16(x) with bf16(w_j), float32 accumulation. Their difference is bounded per row by
//   |L_j − L̃_j| ≤ ‖w_j − w̃_j‖·‖x‖ + ‖w̃_j‖·‖x − x̃‖ + (accumulation error of both sums)
// (Cauchy–Schwarz on Σ(w − w̃)x + Σw̃(x − x̃)); the accumulation error of a float32 sum of K terms in any order is
// at most (K + depth)·2⁻²⁴·Σ|terms| ≤ (K + depth)·2⁻²⁴·‖w‖·‖x‖. With B_j that bound, the exact argmax lies among
// the rows whose upper end L̃_j + B_j reaches T = max_j (L̃_j − B_j): every other row's exact value is below T, and
// the row attaining T is itself a candidate. The candidates (a handful) are rescored with q_gemm_f32_rows.
#include "backend/cpu/kernels.hpp"
#include "core/dtype.hpp"
#include "model/quant.hpp"
#include "ops/ops.hpp"

#ifdef QASR_HAVE_AMX
#include "backend/cpu/bf16_gemm.hpp"
#include <immintrin.h>
#endif

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace qasr::ops {

struct HeadScreen {
    std::vector<float> wnorm; // max(‖w_j‖, ‖w̃_j‖), rounded up
    std::vector<float> werr;  // ‖w_j − w̃_j‖, rounded up
};

namespace {

constexpr size_t kMaxCandidates = 4096; // beyond this many (degenerate heads), rescore the whole row

int first_argmax(const float* x, int64_t n) { return int(std::max_element(x, x + n) - x); }

[[maybe_unused]] float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); } // as vcvtne2ps2bf16 (nearest even)

[[maybe_unused]] float up(double v) { // v as float, rounded towards +∞ (a bound stays a bound)
    float f = float(v);
    if (double(f) < v) f = std::nextafter(f, std::numeric_limits<float>::infinity());
    return f;
}

} // namespace

#ifdef QASR_HAVE_AMX
namespace {

// ‖w‖², ‖w̃‖², ‖w − w̃‖² of one row (w = s·q + b by FMA in float32, as the float32 path; w̃ = bf16(w) rounded to
// nearest even, as the AMX path), float32 partial sums per lane (≤ K/16 terms each), added in double.
__attribute__((target("avx512f,avx512bw"))) void row_norms(const uint8_t* row, const uint16_t* sc, const uint16_t* bi,
                                                          int64_t K, int bits, int gs, double out[3]) {
    alignas(64) float q[1024];
    __m512 n2 = _mm512_setzero_ps(), nt2 = _mm512_setzero_ps(), e2 = _mm512_setzero_ps();
    const __m512i rnd = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), hi = _mm512_set1_epi32(int(0xffff0000u));
    for (int64_t g = 0; g < K / gs; ++g) {
        const __m512 s = _mm512_set1_ps(bf16_to_f32(sc[g])), b = _mm512_set1_ps(bf16_to_f32(bi[g]));
        if (bits == 8) {
            for (int j = 0; j < gs; j += 16)
                _mm512_store_ps(q + j, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(
                                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + g * gs + j)))));
        } else {
            for (int j = 0; j < gs; ++j) q[j] = float(affine_code(row, g * gs + j, bits));
        }
        for (int j = 0; j < gs; j += 16) {
            const __m512 w = _mm512_fmadd_ps(s, _mm512_load_ps(q + j), b);
            const __m512i wb = _mm512_castps_si512(w);
            const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(wb, 16), one);
            const __m512i r = _mm512_add_epi32(_mm512_add_epi32(wb, rnd), lsb);
            const __m512 wt = _mm512_castsi512_ps(_mm512_and_si512(r, hi));
            const __m512 d = _mm512_sub_ps(w, wt); // exact (Sterbenz: w and wt are within a factor of 2)
            n2 = _mm512_fmadd_ps(w, w, n2);
            nt2 = _mm512_fmadd_ps(wt, wt, nt2);
            e2 = _mm512_fmadd_ps(d, d, e2);
        }
    }
    alignas(64) float v[3][16];
    _mm512_store_ps(v[0], n2);
    _mm512_store_ps(v[1], nt2);
    _mm512_store_ps(v[2], e2);
    for (int t = 0; t < 3; ++t) {
        out[t] = 0;
        for (int l = 0; l < 16; ++l) out[t] += double(v[t][l]);
    }
}

} // namespace
#endif

std::shared_ptr<const HeadScreen> head_screen(const WeightMatrix& W) {
#ifdef QASR_HAVE_AMX
    const cpu::KernelTable& k = cpu::kernels();
    if (W.fmt != WFormat::Q || !(W.bits == 4 || W.bits == 6 || W.bits == 8) || !cpu::amx_available() ||
        k.isa != cpu::Isa::Avx512 || W.group_size % 32 != 0 || W.group_size > 1024 || W.cols % 32 != 0 ||
        W.cols > 16384 || W.rows <= 0)
        return nullptr;
    auto s = std::make_shared<HeadScreen>();
    const int64_t V = W.rows, K = W.cols, ng = K / W.group_size, row_bytes = K * W.bits / 8;
    s->wnorm.resize(size_t(V));
    s->werr.resize(size_t(V));
    const auto* codes = static_cast<const uint8_t*>(W.data);
#pragma omp parallel for schedule(static) num_threads(num_threads())
    for (int64_t j = 0; j < V; ++j) {
        double r[3];
        row_norms(codes + j * row_bytes, W.scales + j * ng, W.biases + j * ng, K, W.bits, W.group_size, r);
        // float32 partial sums of ≤ K/16 ≤ 1024 non-negative terms: relative error < 1024·2⁻²⁴ < 1e-4
        s->wnorm[size_t(j)] = up(std::sqrt(std::max(r[0], r[1])) * (1 + 1e-4));
        s->werr[size_t(j)] = up(std::sqrt(r[2]) * (1 + 1e-4));
    }
    return s;
#else
    (void)W;
    return nullptr;
#endif
}

void head_argmax(const float* h, int64_t n, const WeightMatrix& W, const HeadScreen* screen, int* out) {
    if (n <= 0) return;
    [[maybe_unused]] const int64_t V = W.rows, K = W.cols; // K: the AMX path
    if (!screen || int64_t(screen->wnorm.size()) != V) { // the float32 logits themselves
        std::vector<float> logits(size_t(n * V));
        Bf16GemmScope f32(false);
        linear(h, n, W, nullptr, logits.data());
        for (int64_t i = 0; i < n; ++i) out[i] = first_argmax(logits.data() + i * V, V);
        return;
    }
#ifdef QASR_HAVE_AMX
    // The bf16 AMX product (x and w rounded to bf16, float32 sums: the arithmetic B_j is derived for), for any n
    std::vector<float> approx(size_t(n * V));
    const auto* codes = static_cast<const uint8_t*>(W.data);
    {
        thread_local std::vector<uint16_t> xbuf;
        xbuf.resize(cpu::bf16_packed_x_size(n, K));
        cpu::Bf16PackedX px;
        cpu::bf16_pack_x(h, n, K, xbuf.data(), px);
        const int64_t tiles = (V + 127) / 128;
#pragma omp parallel for schedule(dynamic, 1) num_threads(int(std::min<int64_t>(num_threads(), tiles)))
        for (int64_t t = 0; t < tiles; ++t)
            cpu::bf16_q_gemm_rows(codes, W.scales, W.biases, K, W.bits, W.group_size, t * 128,
                                 std::min<int64_t>(128, V - t * 128), px, approx.data() + t * 128, V);
    }
    const double u = std::ldexp(1.0, -24), acc = 2.0 * double(K + 64) * u; // both sums' accumulation, with margin
    std::vector<int64_t> cand;
    std::vector<float> exact;
    for (int64_t i = 0; i < n; ++i) {
        const float* x = h + i * K;
        double x2 = 0, xt2 = 0, d2 = 0;
        for (int64_t c = 0; c < K; ++c) {
            const float xt = bf16_round(x[c]);
            x2 += double(x[c]) * x[c];
            xt2 += double(xt) * xt;
            d2 += (double(x[c]) - xt) * (double(x[c]) - xt);
        }
        const double xn = std::sqrt(x2), xtn = std::sqrt(xt2);
        // B_j = werr_j·a + wnorm_j·b + an absolute floor (denormal products the tiles flush: < K·2⁻¹²⁶ in all),
        // evaluated in float with its operands rounded up and a relative margin for the evaluation's own roundings.
        const float a = up(xn * (1 + 1e-6)), b = up((std::sqrt(d2) + acc * (xn + xtn)) * (1 + 1e-6));
        constexpr float floor_abs = 1e-30f;
        const float* L = approx.data() + i * V;
        const float* we = screen->werr.data();
        const float* wn = screen->wnorm.data();
        // (× 1.01: B_j ≥ 2(K+64)·2⁻²⁴·|L̃_j| by Cauchy–Schwarz, so 1 % of it covers the float rounding of L̃_j ± B_j)
        float T = -std::numeric_limits<float>::infinity();
        bool finite = true;
        for (int64_t j = 0; j < V; ++j) {
            finite = finite && std::isfinite(L[j]);
            T = std::max(T, L[j] - ((we[j] * a + wn[j] * b) * 1.01f + floor_abs));
        }
        cand.clear();
        for (int64_t j = 0; finite && j < V; ++j)
            if (L[j] + ((we[j] * a + wn[j] * b) * 1.01f + floor_abs) >= T) {
                cand.push_back(j);
                if (cand.size() > kMaxCandidates) break;
            }
        if (!finite || cand.empty() || cand.size() > kMaxCandidates || !std::isfinite(T)) { // the whole row
            exact.resize(size_t(V));
            const int64_t tiles = (V + 255) / 256;
#pragma omp parallel for schedule(dynamic, 1) num_threads(int(std::min<int64_t>(num_threads(), tiles)))
            for (int64_t t = 0; t < tiles; ++t)
                cpu::q_gemm_f32_rows(codes, W.scales, W.biases, K, W.bits, W.group_size, t * 256,
                                     std::min(V, t * 256 + 256), x, 1, exact.data() + t * 256, V);
            out[i] = first_argmax(exact.data(), V);
            continue;
        }
        int best = -1;
        float best_v = 0;
        for (int64_t j : cand) { // ascending: the first maximum wins, as over the whole row
            float v;
            cpu::q_gemm_f32_rows(codes, W.scales, W.biases, K, W.bits, W.group_size, j, j + 1, x, 1, &v, 1);
            if (best < 0 || best_v < v) best = int(j), best_v = v; // std::max_element's rule
        }
        out[i] = best;
    }
#endif
}

} // namespace qasr::ops
