// `qasr quantize IN OUT --bits 4|6|8 [--group-size 64] [--encoder]`: MLX affine quantization into the
// mlx-community layout (model/quantize_checkpoint.hpp).
#include "args.hpp"
#include "commands.hpp"

#include "core/timer.hpp"
#include "model/quantize_checkpoint.hpp"

#include <cstdio>
#include <stdexcept>

namespace qasr::cli {

namespace {
const char* kHelp = R"(usage: qasr quantize IN_DIR OUT_DIR --bits 4|6|8 [--group-size 64] [--encoder]

Writes an MLX affine-quantized copy of a checkpoint in the mlx-community layout (loads in qasr and in MLX):
decoder linears and the embedding (the tied LM head) are quantized; --encoder also quantizes the audio
tower's linears and the projector. Bits 2, 3 and 5 are accepted too (stored, computed through float32).
)";
}

int cmd_quantize(int argc, char** argv) {
    Args a(argc, argv, 2);
    std::string in, out, v;
    QuantizeOptions o;
    bool have_bits = false;
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a.option("--bits", v)) {
            o.bits = int(to_long("--bits", v, 2, 8));
            have_bits = true;
        } else if (a.option("--group-size", v)) {
            o.group_size = int(to_long("--group-size", v, 32, 128));
        } else if (a.flag("--encoder")) {
            o.encoder = true;
        } else if (a.peek().rfind("-", 0) == 0) {
            throw std::invalid_argument("quantize: unknown option " + a.peek());
        } else if (in.empty()) {
            in = a.next();
        } else if (out.empty()) {
            out = a.next();
        } else {
            throw std::invalid_argument("quantize: unexpected argument " + a.peek());
        }
    }
    if (in.empty() || out.empty() || !have_bits)
        throw std::invalid_argument("quantize: usage: qasr quantize IN_DIR OUT_DIR --bits 4|6|8 [--group-size 64]");
    Stopwatch sw;
    const QuantizeReport r = quantize_checkpoint(in, out, o);
    std::fprintf(stderr, "qasr quantize: %d modules at %d bits (group %d), %d kept float; %.1f MB in %.1f s\n",
                 r.quantized, o.bits, o.group_size, r.kept_float, double(r.bytes_out) / 1e6, sw.ms() / 1000.0);
    return 0;
}

} // namespace qasr::cli
