// The ops tests run once per forced ISA (QASR_ISA, tests/ops/CMakeLists.txt). On a CPU without the forced ISA the
// whole run is skipped (exit code 77, ctest's SKIP_RETURN_CODE) before any test: a test that builds a model would
// otherwise fail on the kernel table's "not supported by this CPU" (as seven did on an AVX2-only CPU).
#include "backend/cpu/kernels.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

class ForcedIsa : public testing::Environment {
public:
    void SetUp() override {
        const char* e = std::getenv("QASR_ISA");
        if (!e || !*e) return;
        const std::string v = e;
        using qasr::cpu::Isa;
        if (qasr::cpu::isa_supported(v == "avx2" ? Isa::Avx2 : v == "avx512" ? Isa::Avx512 : Isa::Portable)) return;
        std::printf("QASR_ISA=%s is not supported by this CPU: skipped\n", e);
        std::fflush(stdout);
        std::_Exit(77);
    }
};

testing::Environment* const g_forced_isa = testing::AddGlobalTestEnvironment(new ForcedIsa);

} // namespace
