// `qasr quantize IN OUT --bits 4|6|8 | --recipe mixed_4_6 [--group-size 64] [--encoder]`: MLX affine quantization
// into the mlx-community layout (model/quantize_checkpoint.hpp).
#include "args.hpp"
#include "commands.hpp"

#include "core/timer.hpp"
#include "model/quantize_checkpoint.hpp"

#include <cstdio>
#include <stdexcept>

namespace qasr::cli {

namespace {
const char* kHelp = R"(usage: qasr quantize IN_DIR OUT_DIR --bits 4|6|8 [--group-size 64] [--encoder]
       qasr quantize IN_DIR OUT_DIR --recipe mixed_4_6|mixed_3_6|mixed_3_4|mixed_2_6 [--group-size 64] [--encoder]

Writes an MLX affine-quantized copy of a checkpoint in the mlx-community layout (loads in qasr and in MLX):
decoder linears and the embedding (the tied LM head) are quantized; --encoder also quantizes the audio
tower's linears and the projector. Bits 2, 3 and 5 are accepted too (stored, computed through float32).
--recipe mixed_L_H: mlx-lm's mixed precision (mlx_lm.convert --quant-predicate): L bits, except v_proj and
down_proj in the first and last eighth of the decoder layers and every third layer between, at H bits.
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
        } else if (a.option("--recipe", v)) {
            o.recipe = v;
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
    if (in.empty() || out.empty() || have_bits == !o.recipe.empty())
        throw std::invalid_argument("quantize: usage: qasr quantize IN_DIR OUT_DIR --bits 4|6|8 | --recipe mixed_4_6 "
                                    "[--group-size 64] (--bits or --recipe, one of them)");
    Stopwatch sw;
    const QuantizeReport r = quantize_checkpoint(in, out, o);
    const std::string widths = o.recipe.empty() ? std::to_string(o.bits) + " bits"
                                                : o.recipe + " (" + std::to_string(r.high_bits) + " at the high width)";
    std::fprintf(stderr, "qasr quantize: %d modules at %s (group %d), %d kept float; %.1f MB in %.1f s\n", r.quantized,
                 widths.c_str(), o.group_size, r.kept_float, double(r.bytes_out) / 1e6, sw.ms() / 1000.0);
    return 0;
}

} // namespace qasr::cli
