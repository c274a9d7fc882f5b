// `qasr dev make-random`: writes deterministic random-weight checkpoints (tiny / 0.6b / 1.7b, hf or original
// layout) for parity tests and benchmarks; see docs/reference-dumps.md.
#include "args.hpp"
#include "commands.hpp"

#include "model/random_checkpoint.hpp"

#include <cstdio>
#include <stdexcept>

namespace qasr::cli {

int cmd_dev(int argc, char** argv) {
    const char* help = "usage: qasr dev make-random --preset tiny|0.6b|1.7b [--layout hf|original] [--seed N]\n"
                       "                            [--tokenizer DIR] OUT_DIR\n";
    if (argc < 3 || std::string(argv[2]) == "-h" || std::string(argv[2]) == "--help") {
        std::fputs(help, stdout);
        return argc < 3 ? 2 : 0;
    }
    if (std::string(argv[2]) != "make-random") throw std::invalid_argument("unknown dev command " + std::string(argv[2]));
    Args a(argc, argv, 3);
    std::string preset, layout = "hf", tok, out, v;
    uint64_t seed = 1;
    while (!a.done()) {
        if (a.option("--preset", preset) || a.option("--layout", layout) || a.option("--tokenizer", tok)) {
        } else if (a.option("--seed", v)) {
            seed = uint64_t(to_long("--seed", v, 0, 1L << 40));
        } else if (a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek());
        } else {
            out = a.next();
        }
    }
    if (preset.empty() || out.empty()) throw std::invalid_argument(help);
    write_random_checkpoint(out, preset, layout, seed, tok);
    return 0;
}

} // namespace qasr::cli
