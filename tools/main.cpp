// The qasr command line: dispatches subcommands; the one place (with the C API) where errors are caught and
// turned into a one-line message and a non-zero exit status.
#include "capture.hpp"
#include "cmd_itn.hpp"
#include "commands.hpp"

#include "backend/cpu/blas_core.hpp"
#include "core/error.hpp"
#include "qasr/qasr.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <exception>
#include <new>
#include <string>

namespace {

const char* kUsage = R"(usage: qasr COMMAND [options]

commands:
  transcribe   transcribe audio files            (qasr transcribe --help)
  align        word timestamps of a known transcript (forced aligner) (qasr align --help)
  stream       live transcription from stdin or a replayed file (qasr stream --help)
  serve        HTTP server: OpenAI-compatible transcription API (qasr serve --help)
  itn          inverse text normalization of stdin lines (qasr itn --help)
  quantize     MLX affine 4/6/8-bit quantization (qasr quantize --help)
  bench        speed and memory benchmark      (qasr bench --help)
  dev          developer tools: make-random checkpoints
  version      version, build features, CPU kernels and CUDA devices (also --version)
  help         this text

Set-up, benchmarks and the model format are described in README.md and docs/.
)";

std::string one_line(std::string s) {
    for (auto& c : s)
        if (c == '\n') c = ';';
    return s;
}

} // namespace

void qasr::cli::log_verbose() {
    qasr::set_log_sink([](qasr::LogLevel level, const std::string& m) {
        if (level >= qasr::LogLevel::Info) std::fprintf(stderr, "qasr: %s\n", m.c_str());
    });
}

// The environment the libraries read when they load, before main: unless the user set them, re-run the process once
// (execv of itself) with settings that suit qasr.
static void rerun_with_tuned_environment(char** argv) {
    // libgomp reads its spin-wait budget when it loads, before main: by default an idle worker spins for ~300k
    // iterations (milliseconds) before sleeping, which on a machine shared with other busy processes makes every
    // parallel region of the decode wait for descheduled spinners (2–5× slower decode measured on the 2-core
    // benchmark machine under load). Unless the user chose a policy, re-run once with a short spin — 10k on up to 7
    // cores, 100k from 8: on 16 cores the short spin's sleeps and wake-ups cost 10–15 % of a transcription (16-core
    // Xeon, 0.6B 8-bit, 11 s: 350 ms against 297–323 ms with 100k or 300k; docs/benchmarks.md, session 33).
    bool rerun = false;
    if (!std::getenv("GOMP_SPINCOUNT") && !std::getenv("OMP_WAIT_POLICY")) {
        ::setenv("GOMP_SPINCOUNT", ::sysconf(_SC_NPROCESSORS_ONLN) >= 8 ? "100000" : "10000", 1);
        rerun = true;
    }
    // OpenBLAS chose its kernels when it loaded, from the CPU model: a model newer than the library gets its pre-AVX
    // (Prescott) kernels, ~3x slower float32 products (backend/cpu/blas_core.hpp). Unless the user chose, re-run
    // with its AVX-512 or AVX2 family.
    if (const std::string core = qasr::cpu::blas_core_advice(); !core.empty()) {
        ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
        rerun = true;
    }
    // OpenBLAS starts a thread per core when it loads, each spinning (sched_yield) for a while before it sleeps, for
    // nothing: qasr calls it from its own OpenMP team with one thread each (backend/cpu/linear_cpu.cpp). A re-run
    // does not start them.
    if (rerun && !std::getenv("OPENBLAS_NUM_THREADS")) ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (rerun) ::execv("/proc/self/exe", argv); // on failure, carry on as loaded
}

int main(int argc, char** argv) {
    rerun_with_tuned_environment(argv);
    if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help")) {
        std::fputs(kUsage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const std::string cmd = argv[1];
    try {
        if (cmd == "version" || cmd == "--version" || cmd == "-V") {
            std::printf("%s\ncli: HTTP server (qasr serve) %s, microphone capture (qasr stream --capture, SDL2) %s\n",
                        qasr::system_info().c_str(),
#ifdef QASR_HAVE_SERVER
                        "yes",
#else
                        "no",
#endif
                        qasr::cli::AudioCapture::available() ? ("yes (" + qasr::cli::AudioCapture::module_path() + ")").c_str() : "no");
            return 0;
        }
        if (cmd == "transcribe") return qasr::cli::cmd_transcribe(argc, argv);
        if (cmd == "align") return qasr::cli::cmd_align(argc, argv);
        if (cmd == "dev") return qasr::cli::cmd_dev(argc, argv);
        if (cmd == "quantize") return qasr::cli::cmd_quantize(argc, argv);
        if (cmd == "bench") return qasr::cli::cmd_bench(argc, argv);
        if (cmd == "itn") return qasr::cli::cmd_itn(argc, argv);
        if (cmd == "stream") return qasr::cli::cmd_stream(argc, argv);
        if (cmd == "serve") return qasr::cli::cmd_serve(argc, argv);
        std::fprintf(stderr, "qasr: error: unknown command '%s' (see qasr help)\n", cmd.c_str());
        return 2;
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "qasr: error: %s\n", one_line(e.what()).c_str());
        return 2;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "qasr: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qasr: error: %s\n", one_line(e.what()).c_str());
        return 1;
    }
}
