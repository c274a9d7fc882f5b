// CPU norms and activations (fp32, with double accumulation for the norms' statistics).
#include "backend/cpu/elementwise.hpp"
#include "backend/cpu/kernels.hpp"
#include "ops/ops.hpp"
#include "core/error.hpp"
#include "ops/vector_ops.hpp"
#ifdef QASR_HAVE_AMX
#include "backend/cpu/prefill_avx512.hpp"
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <omp.h>
#include <vector>

namespace qasr::cpu {

void rms_norm_serial(float* x, int64_t rows, int64_t d, const float* w, float eps) {
    for (int64_t r = 0; r < rows; ++r) {
        float* v = x + r * d;
        // sum of squares in double over four interleaved partial sums (four independent add chains instead of one:
        // the decode step runs ≈5000 of these values per layer on one thread)
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t i = 0;
        for (; i + 4 <= d; i += 4) {
            s0 += double(v[i]) * v[i];
            s1 += double(v[i + 1]) * v[i + 1];
            s2 += double(v[i + 2]) * v[i + 2];
            s3 += double(v[i + 3]) * v[i + 3];
        }
        for (; i < d; ++i) s0 += double(v[i]) * v[i];
        const double ss = (s0 + s1) + (s2 + s3);
        const float inv = float(1.0 / std::sqrt(ss / double(d) + double(eps)));
        for (i = 0; i < d; ++i) v[i] = w[i] * (v[i] * inv);
    }
}

void silu_mul_serial(float* gate, const float* up, size_t n) {
    for (size_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_erf_serial(float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * float(M_SQRT1_2)));
}

namespace {
ErfTable make_erf_table() {
    ErfTable t{};
    const long double two_over_sqrt_pi = 1.128379167095512573896158903121545172L;
    for (int i = 0; i < 32; ++i) {
        const long double c = i == 0 ? 0.0L : (i + 0.5L) / 8.0L;
        t.ctr[i] = float(c);
        // erf^(n)(c) = (2/√π)·(−1)^(n−1)·H_{n−1}(c)·e^(−c²) (physicists' Hermite polynomials); a_n = erf^(n)(c)/n!
        long double H[8];
        H[0] = 1.0L;
        H[1] = 2.0L * c;
        for (int k = 1; k < 7; ++k) H[k + 1] = 2.0L * c * H[k] - 2.0L * k * H[k - 1];
        const long double g = two_over_sqrt_pi * std::exp(-c * c);
        long double fact = 1.0L;
        t.c[0][i] = float(std::erf(c));
        for (int n = 1; n < 8; ++n) {
            fact *= n;
            t.c[n][i] = float(g * ((n - 1) % 2 ? -1.0L : 1.0L) * H[n - 1] / fact);
        }
        for (int n = 0; n < 8; ++n) t.rec[i][n] = t.c[n][i];
    }
    return t;
}
} // namespace

const ErfTable& erf_table() {
    static const ErfTable t = make_erf_table();
    return t;
}

} // namespace qasr::cpu

namespace qasr::ops {

namespace {
void layer_norm_row(float* v, int64_t d, const float* w, const float* b, float eps) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += v[i];
    mean /= double(d);
    for (int64_t i = 0; i < d; ++i) var += (v[i] - mean) * (v[i] - mean);
    var /= double(d);
    const float inv = float(1.0 / std::sqrt(var + double(eps)));
    const float m = float(mean);
    for (int64_t i = 0; i < d; ++i) v[i] = (v[i] - m) * inv * w[i] + b[i];
}
} // namespace

void layer_norm(float* x, int64_t rows, int64_t d, const float* w, const float* b, float eps) {
#pragma omp parallel for if (rows > 8)
    for (int64_t r = 0; r < rows; ++r) layer_norm_row(x + r * d, d, w, b, eps);
}

void residual_layer_norm_rows(float* h, const float* y, const float* bias, float* out, int64_t n, int64_t d,
                              const float* w, const float* b, float eps) {
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t r = 0; r < n; ++r) {
        float* hr = h + r * d;
        if (y) {
            const float* yr = y + r * d;
            if (bias)
                for (int64_t i = 0; i < d; ++i) hr[i] += yr[i] + bias[i];
            else
                for (int64_t i = 0; i < d; ++i) hr[i] += yr[i];
        }
        if (out) {
            std::copy(hr, hr + d, out + r * d);
            layer_norm_row(out + r * d, d, w, b, eps);
        }
    }
}

void bias_rows(float* y, const float* bias, int64_t n, int64_t d, bool gelu) {
    void (*const g)(float*, size_t) = cpu::kernels().gelu_erf;
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t r = 0; r < n; ++r) {
        float* yr = y + r * d;
        if (bias)
            for (int64_t i = 0; i < d; ++i) yr[i] += bias[i];
        if (gelu) g(yr, size_t(d));
    }
}

void rms_norm(float* x, int64_t rows, int64_t d, const float* w, float eps) {
    // per row the same arithmetic on any thread; a team only where there is enough work to pay for the fork/join
    // (not the per-head q/k norms of a decode step: 16 × 128 values)
#pragma omp parallel for if (rows > 8 && rows * d >= 16384)
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm_serial(x + r * d, 1, d, w, eps);
}

namespace {
// The row norms of the multi-row pass: in the bf16 scope (quantized checkpoints) with the AVX-512 table the vector
// kernel (16 partial sums); float checkpoints keep rms_norm_serial, the decode step's arithmetic, bit for bit.
using RowNorm = void (*)(float*, int64_t, int64_t, const float*, float);
RowNorm row_norm() {
#ifdef QASR_HAVE_AMX
    if (bf16_gemm_enabled() && cpu::kernels().isa == cpu::Isa::Avx512) return cpu::rms_norm_rows_avx512;
#endif
    return cpu::rms_norm_serial;
}
} // namespace

void add_rms_norm_rows(float* x, const float* a, float* u, int64_t n, int64_t d, const float* w, float eps) {
    const RowNorm norm = row_norm();
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t r = 0; r < n; ++r) {
        float* xr = x + r * d;
        if (a) {
            const float* ar = a + r * d;
            for (int64_t i = 0; i < d; ++i) xr[i] += ar[i];
        }
        if (u) {
            std::copy(xr, xr + d, u + r * d);
            norm(u + r * d, 1, d, w, eps);
        }
    }
}

void qk_norm_rope_rows(float* q, float* k, int64_t n, int64_t Hq, int64_t Hkv, int64_t hd, const float* qw,
                       const float* kw, float eps, const float* cs, void (*put)(void* ctx, int64_t t), void* ctx) {
    const RowNorm norm = row_norm();
#pragma omp parallel for schedule(static) if (n > 1)
    for (int64_t t = 0; t < n; ++t) {
        float* qt = q + t * Hq * hd;
        float* kt = k + t * Hkv * hd;
        norm(qt, Hq, hd, qw, eps);
        norm(kt, Hkv, hd, kw, eps);
        rope_cs(qt, 1, Hq, hd, cs + t * hd);
        rope_cs(kt, 1, Hkv, hd, cs + t * hd);
        if (put) put(ctx, t);
    }
}

void gelu_erf(float* x, size_t n) {
    // the active table's kernel (AVX2 / AVX-512: the vector erf of cpu::erf_table, ≤ 2 ulp from std::erf; portable:
    // std::erf), in chunks over the team when there is enough work
    void (*const k)(float*, size_t) = cpu::kernels().gelu_erf;
    constexpr size_t kChunk = 16384;
    if (n <= 65536) return k(x, n);
    const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) k(x + size_t(c) * kChunk, std::min(kChunk, n - size_t(c) * kChunk));
}

void silu_mul(float* gate, const float* up, size_t n) {
    if (n <= 65536) return cpu::silu_mul_serial(gate, up, n);
#pragma omp parallel for
    for (size_t i = 0; i < n; i += 16384) cpu::silu_mul_serial(gate + i, up + i, std::min<size_t>(16384, n - i));
}

void add(float* y, const float* x, size_t n) {
    for (size_t i = 0; i < n; ++i) y[i] += x[i];
}

void softmax_row(float* x, int64_t n) {
    float mx = x[0];
    for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += x[i];
    }
    const float inv = float(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

namespace {
// The row in P = n/16384 slices (1..64, by n alone, so that the result does not depend on the thread count or on
// whether this runs inside another parallel region): each slice's first maximum (its lowest index), merged in
// slice order; then each slice's Σ exp(x − max) with the kernel table's sum_exp (in double), added in slice order.
// Returns the maximum; *argmax its lowest index.
int sum_slices(int64_t n) { return int(std::clamp<int64_t>(n / 16384, 1, 64)); }

// Σ exp(x − mx) over the row's slices (the kernel table's sum_exp, in double), added in slice order.
double slice_sum_exp(const float* x, int64_t n, float mx) {
    const cpu::KernelTable& K = cpu::kernels();
    const int P = sum_slices(n);
    std::vector<double> psum(size_t(P), 0.0);
#pragma omp parallel for schedule(static) if (P > 1)
    for (int p = 0; p < P; ++p) {
        const int64_t lo = n * p / P, hi = n * (p + 1) / P;
        psum[size_t(p)] = K.sum_exp(x + lo, hi - lo, mx);
    }
    double sum = 0;
    for (double v : psum) sum += v;
    return sum;
}

float max_sum_exp(const float* x, int64_t n, int64_t* argmax, double& sum) {
    const int P = sum_slices(n);
    std::vector<float> pmax(size_t(P), -std::numeric_limits<float>::infinity());
    std::vector<int64_t> pidx(size_t(P), 0);
#pragma omp parallel for schedule(static) if (P > 1)
    for (int p = 0; p < P; ++p) {
        const int64_t lo = n * p / P, hi = n * (p + 1) / P;
        float m = -std::numeric_limits<float>::infinity();
        int64_t mi = lo;
        for (int64_t i = lo; i < hi; ++i)
            if (x[i] > m) m = x[i], mi = i;
        pmax[size_t(p)] = m;
        pidx[size_t(p)] = mi;
    }
    int best = 0;
    for (int p = 1; p < P; ++p)
        if (pmax[size_t(p)] > pmax[size_t(best)]) best = p; // strict: the earlier slice wins ties
    const float mx = pmax[size_t(best)];
    sum = slice_sum_exp(x, n, mx);
    if (argmax) *argmax = pidx[size_t(best)];
    return mx;
}
} // namespace

void top_logprobs(const float* x, int64_t n, int k, int64_t* ids, float* logprobs) {
    if (k <= 0) return;
    if (k > n) fail("ops", "top_logprobs: k exceeds the row");
    // one serial pass keeps a min-heap of the k best (value desc, index asc); an element enters only above the
    // heap's smallest (equal values keep the lower index already held), so the loop is one compare per element
    auto better = [&](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
    std::vector<int64_t> h;
    h.reserve(size_t(k));
    for (int64_t i = 0; i < k; ++i) h.push_back(i);
    std::make_heap(h.begin(), h.end(), better);
    float thr = x[h.front()];
    auto visit = [&](int64_t i) {
        if (x[i] > thr) {
            std::pop_heap(h.begin(), h.end(), better);
            h.back() = i;
            std::push_heap(h.begin(), h.end(), better);
            thr = x[h.front()];
        }
    };
    int64_t i = k;
    for (; i + 64 <= n; i += 64) { // a block is looked at element by element only where one beats the threshold
        int any = 0;
        for (int j = 0; j < 64; ++j) any |= x[i + j] > thr; // vectorizes: compares and ors
        if (any)
            for (int j = 0; j < 64; ++j) visit(i + j);
    }
    for (; i < n; ++i) visit(i);
    std::sort(h.begin(), h.end(), better);
    // the largest is the row's maximum: the sum as argmax_logprob forms it (same slices, same order)
    const float mx = x[h.front()];
    const double ls = std::log(slice_sum_exp(x, n, mx));
    for (int j = 0; j < k; ++j) {
        ids[j] = h[size_t(j)];
        logprobs[j] = float(double(x[h[size_t(j)]] - mx) - ls);
    }
}

int64_t argmax_logprob(const float* x, int64_t n, int64_t at, float& logprob) {
    double s = 0;
    int64_t am = 0;
    const float mx = max_sum_exp(x, n, &am, s);
    if (at < 0) at = am;
    logprob = float(double(x[at] - mx) - std::log(s));
    return at;
}

void rope(float* x, int64_t n, int64_t heads, int64_t hd, int64_t pos0, const float* inv_freq) {
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < n; ++t) {
        const float p = float(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const float ang = p * inv_freq[i];
            const float c = std::cos(ang), s = std::sin(ang);
            for (int64_t h = 0; h < heads; ++h) {
                float* v = x + (t * heads + h) * hd;
                const float a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = b * c + a * s;
            }
        }
    }
}

void rope_table(int64_t n, int64_t hd, int64_t pos0, const float* inv_freq, float* cs) {
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < n; ++t) {
        const float p = float(pos0 + t);
        for (int64_t i = 0; i < half; ++i) {
            const float ang = p * inv_freq[i];
            cs[t * hd + i] = std::cos(ang);
            cs[t * hd + half + i] = std::sin(ang);
        }
    }
}

void rope_cs(float* x, int64_t n, int64_t heads, int64_t hd, const float* cs) {
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < n; ++t) {
        const float* c = cs + t * hd;
        const float* s = c + half;
        for (int64_t h = 0; h < heads; ++h) {
            float* v = x + (t * heads + h) * hd;
            for (int64_t i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

} // namespace qasr::ops
