// qasr::system_info() / qasr_system_info(): the version, what this build has and what it finds on this machine —
// the lines to paste into a bug report (`qasr version`).
#include "audio/audio.hpp"
#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/device.hpp"
#include "ops/ops.hpp"
#include "qasr/qasr.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

namespace qasr {
namespace {

std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) {
            const auto c = line.find(':');
            if (c != std::string::npos) return line.substr(line.find_first_not_of(' ', c + 1));
        }
    return "unknown CPU";
}

} // namespace

std::string system_info() {
    std::string s = "qasr " QASR_VERSION_STRING;
#if defined(__clang__)
    s += " (clang " __clang_version__ ")";
#elif defined(__GNUC__)
    s += " (GCC " __VERSION__ ")";
#endif
    s += "\nbuild: CUDA backend ";
#ifdef QASR_HAVE_CUDA
    s += "yes (architectures " QASR_CUDA_ARCHS ")";
#else
    s += "no";
#endif
    s += std::string(", FFmpeg decoding ") + (ffmpeg_available() ? "yes (" + ffmpeg_module_path() + ")" : "no") + ", OpenBLAS ";
    if (const std::string core = cpu::blas_core(); core.empty()) {
        s += "no";
    } else {
        // its kernel family; OPENBLAS_CORETYPE when set (the qasr command sets it where OpenBLAS does not know the CPU)
        const char* forced = std::getenv("OPENBLAS_CORETYPE");
        const std::string advice = cpu::blas_core_advice();
        s += "yes (" + core + " kernels" + (forced ? std::string(", OPENBLAS_CORETYPE=") + forced : "") +
             (advice.empty() ? "" : "; a CPU it does not know: OPENBLAS_CORETYPE=" + advice + " is faster") + ")";
    }
    const char* bf16 = ops::bf16_gemm_engine();
    s += "\ncpu: " + cpu_model() + ", " + std::to_string(ops::num_threads()) + " threads, kernels " +
         cpu::kernels().name + " (QASR_ISA forces one), bf16 products " +
         (std::string(bf16) == "none" ? "none (float32 only)" : bf16) + ", float32 products " +
         ops::f32_gemm_engine();
    if (built_with_cuda()) {
        const int n = cuda_device_count();
        s += "\ncuda: " + (n ? std::to_string(n) + " device" + (n > 1 ? "s" : "") : "no device or driver");
        for (int i = 0; i < n; ++i) s += "\n  cuda:" + std::to_string(i) + " " + cuda_device_description(i);
    }
    return s;
}

} // namespace qasr
