// The portable kernel table (plain C++, the reference for the SIMD tables) and the start-up ISA selection.
#include "backend/cpu/kernels.hpp"
#include "backend/cpu/elementwise.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"

#if defined(__x86_64__) || defined(__i386__)
#define QASR_X86 1
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>

namespace qasr::cpu {
namespace {

#include "backend/cpu/kernels_generic.inc"

void p_q_prep(const float* x, int64_t K, int bits, int gs, float* xp, float* xs) {
    std::memcpy(xp, x, size_t(K) * sizeof(float));
    group_sums(x, K, gs, xs);
}

void p_q_gemv(const uint8_t* W, const uint16_t* scales, const uint16_t* biases, int64_t K, int bits, int gs,
              const float* xp, const float* xs, float* y, int64_t r0, int64_t r1) {
    const int64_t ng = K / gs, row_bytes = K * bits / 8, gbytes = int64_t(gs) * bits / 8;
    float q[256];
    for (int64_t r = r0; r < r1; ++r) {
        const uint8_t* row = W + r * row_bytes;
        float acc = 0;
        for (int64_t g = 0; g < ng; ++g) {
            unpack_group(row + g * gbytes, bits, gs, q);
            float d = 0;
            for (int j = 0; j < gs; ++j) d += q[j] * xp[g * gs + j];
            acc += bf16f(scales[r * ng + g]) * d + bf16f(biases[r * ng + g]) * xs[g];
        }
        y[r] = acc;
    }
}

void p_bf16_gemv(const uint16_t* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* w = W + r * K;
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += bf16f(w[k]) * x[k];
        y[r] = acc;
    }
}

void p_f32_gemv(const float* W, int64_t K, const float* x, float* y, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
        const float* w = W + r * K;
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += w[k] * x[k];
        y[r] = acc;
    }
}

float p_dot(const float* a, const float* b, int64_t n) {
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
    return acc;
}

void p_axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

float p_sum(const float* x, int64_t n) {
    float acc = 0;
    for (int64_t i = 0; i < n; ++i) acc += x[i];
    return acc;
}

double p_sum_exp(const float* x, int64_t n, float m) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(std::exp(x[i] - m));
    return sum;
}

void p_softmax(float* x, int64_t n) { ops::softmax_row(x, n); } // the reference softmax, bit for bit

const KernelTable kPortable{Isa::Portable, "portable",        p_q_prep,          p_q_gemv, p_bf16_gemv,
                            p_f32_gemv,    generic_q_dequant, generic_bf16_to_f32, p_dot,  p_axpy,
                            generic_attn_scores<p_dot>, generic_attn_wsum<p_axpy>, p_sum,
                            generic_attn_scores_bf16<p_dot>, generic_attn_wsum_bf16<p_axpy>, p_sum_exp, p_softmax, gelu_erf_serial};

const KernelTable* g_active = nullptr;

#ifdef QASR_X86
// F16C through CPUID (leaf 1, ECX bit 29): clang 14's __builtin_cpu_supports does not know "f16c".
bool cpu_has_f16c() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

bool cpu_has(Isa isa) {
#ifndef QASR_X86 // other CPUs (ARM, ...): the portable table, which the compiler vectorizes for the target
    return isa == Isa::Portable;
#else
    __builtin_cpu_init();
    switch (isa) {
    case Isa::Portable: return true;
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::Avx512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
    }
    return false;
#endif
}

const KernelTable* table_for(Isa isa) {
    switch (isa) {
    case Isa::Portable: return &kPortable;
    case Isa::Avx2: return avx2_kernels();
    case Isa::Avx512: return avx512_kernels();
    }
    return nullptr;
}

const KernelTable& select_at_startup() {
    if (const char* e = std::getenv("QASR_ISA"); e && *e) {
        const std::string v = e;
        Isa want = v == "portable" ? Isa::Portable : v == "avx2" ? Isa::Avx2 : v == "avx512" ? Isa::Avx512 : Isa(-1);
        if (int(want) < 0) fail("cpu", "QASR_ISA=" + v + ": expected portable, avx2 or avx512");
        if (!isa_supported(want)) fail("cpu", "QASR_ISA=" + v + ": not supported by this CPU or build");
        return *table_for(want);
    }
    return *table_for(best_isa());
}

} // namespace

const KernelTable& portable_kernels() { return kPortable; }

#ifndef QASR_HAVE_AVX2_KERNELS
const KernelTable* avx2_kernels() { return nullptr; }
#endif
#ifndef QASR_HAVE_AVX512_KERNELS
const KernelTable* avx512_kernels() { return nullptr; }
#endif

bool isa_supported(Isa isa) { return table_for(isa) != nullptr && cpu_has(isa); }

Isa best_isa() {
    if (isa_supported(Isa::Avx512)) return Isa::Avx512;
    if (isa_supported(Isa::Avx2)) return Isa::Avx2;
    return Isa::Portable;
}

const KernelTable& kernels() {
    static const KernelTable& init = (g_active = &select_at_startup(), *g_active);
    (void)init;
    return *g_active;
}

void set_isa(Isa isa) {
    (void)kernels();
    if (!isa_supported(isa)) fail("cpu", std::string("ISA ") + isa_name(isa) + " is not supported here");
    g_active = table_for(isa);
}

const char* isa_name(Isa isa) {
    switch (isa) {
    case Isa::Portable: return "portable";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    }
    return "?";
}

} // namespace qasr::cpu
