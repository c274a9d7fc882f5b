// OpenBLAS's kernel family and the advice when it runs pre-AVX kernels on a modern CPU (blas_core.hpp).
#include "backend/cpu/blas_core.hpp"

#include "backend/cpu/kernels.hpp"

#include <cstdlib>

#ifdef QASR_HAVE_OPENBLAS
extern "C" char* openblas_get_corename(void);
#endif

namespace qasr::cpu {

std::string blas_core() {
#ifdef QASR_HAVE_OPENBLAS
    const char* n = openblas_get_corename();
    return n ? std::string(n) : std::string("unknown");
#else
    return {};
#endif
}

std::string blas_core_advice_for(const std::string& core, bool avx2_fma, bool avx512, bool user_chose) {
    if (user_chose || !avx2_fma) return {};
    // OpenBLAS's x86-64 families without AVX kernels (its names, any case): what it falls back to on a CPU it does
    // not know is one of these, usually Prescott
    static const char* const kOld[] = {"katmai",     "coppermine", "northwood", "prescott", "banias", "atom",
                                       "core2",      "penryn",     "dunnington", "nehalem", "athlon", "opteron",
                                       "opteron_sse3", "barcelona", "nano",      "bobcat"};
    std::string c;
    for (const char ch : core) c += char(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
    for (const char* o : kOld)
        if (c == o) return avx512 ? "SkylakeX" : "Haswell";
    return {};
}

std::string blas_core_advice() {
#ifdef QASR_HAVE_OPENBLAS // (isa_supported is false for the x86 families on other CPUs)
    return blas_core_advice_for(blas_core(), isa_supported(Isa::Avx2), isa_supported(Isa::Avx512),
                                std::getenv("OPENBLAS_CORETYPE") != nullptr);
#else
    return {};
#endif
}

} // namespace qasr::cpu
