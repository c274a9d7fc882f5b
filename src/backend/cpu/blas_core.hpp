// Which kernels OpenBLAS runs, and a better choice where it does not know the CPU. OpenBLAS picks its kernels
// (DYNAMIC_ARCH) from the CPU model when the library loads; a model newer than the library (Debian 12's 0.3.21 on
// the H100 machine's Xeon, reported as "Intel Xeon Processor") falls back to its Prescott (SSE3) kernels, and the
// float32 products run ~3× slower than with its AVX-512 ones (0.6B bf16 checkpoint, 11 s, 16 threads: 1589 → 485
// ms). The choice can only be changed before the library loads (OPENBLAS_CORETYPE): the qasr command re-runs itself
// with it (tools/main.cpp); library users get a warning when a model is loaded.
#pragma once
#include <string>

namespace qasr::cpu {

// OpenBLAS's kernel family ("Haswell", "SkylakeX", "Prescott", …); empty in builds without OpenBLAS.
std::string blas_core();

// The OPENBLAS_CORETYPE that would serve this CPU better — "SkylakeX" (AVX-512F/BW/DQ/VL) or "Haswell" (AVX2 + FMA)
// — when OpenBLAS runs kernels from before AVX (a CPU it does not know) and OPENBLAS_CORETYPE is not set; else "".
std::string blas_core_advice();

// The decision itself, for tests: `core` as blas_core() names it, what the CPU supports, whether the user chose.
std::string blas_core_advice_for(const std::string& core, bool avx2_fma, bool avx512, bool user_chose);

} // namespace qasr::cpu
