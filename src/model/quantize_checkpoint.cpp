// Quantizes a checkpoint into the mlx-community layout with MLX's affine algorithm (model/quant.cpp).
// What is quantized follows mlx-audio's predicate for Qwen3-ASR: every decoder linear and the embedding (which
// doubles as the tied LM head); with QuantizeOptions::encoder also the audio tower's linears and the projector.
// A module is quantized only when its input width is a multiple of the group size (as mlx-lm requires). With a
// recipe (QuantizeOptions::recipe) the widths vary per module, as mlx-lm's mixed-precision conversions.
#include "model/quantize_checkpoint.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "model/quant.hpp"
#include "model/weights.hpp"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace qasr {
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> float_bytes(const float* v, size_t n, DType dt) {
    std::vector<uint8_t> out(n * dtype_size(dt));
    for (size_t i = 0; i < n; ++i) {
        if (dt == DType::F32) {
            std::memcpy(out.data() + 4 * i, v + i, 4);
        } else {
            const uint16_t h = f32_to_bf16(v[i]);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) fail("quantize", path + ": cannot read");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A recipe's widths (low, high); {bits, bits} without one.
std::pair<int, int> recipe_bits(const QuantizeOptions& o) {
    if (o.recipe.empty()) return {o.bits, o.bits};
    if (o.recipe == "mixed_2_6") return {2, 6};
    if (o.recipe == "mixed_3_4") return {3, 4};
    if (o.recipe == "mixed_3_6") return {3, 6};
    if (o.recipe == "mixed_4_6") return {4, 6};
    fail("quantize", "recipe '" + o.recipe + "': expected mixed_2_6, mixed_3_4, mixed_3_6 or mixed_4_6");
}

// mlx-lm's mixed_quant_predicate: v_proj and down_proj of decoder layer i of L get the high width when i is in the
// first or last eighth of the layers, or every third layer between.
bool more_bits(const std::string& name, int layers) {
    const std::string pre = "model.language_model.layers.";
    if (name.rfind(pre, 0) != 0) return false;
    if (name.find(".self_attn.v_proj.") == std::string::npos && name.find(".mlp.down_proj.") == std::string::npos)
        return false;
    const int i = std::stoi(name.substr(pre.size()));
    return i < layers / 8 || i >= 7 * layers / 8 || (i - layers / 8) % 3 == 2;
}

} // namespace

QuantizeReport quantize_checkpoint(const std::string& in_dir, const std::string& out_dir, const QuantizeOptions& o) {
    const std::string C = "quantize";
    const std::pair<int, int> widths = recipe_bits(o);
    const int low = widths.first, high = widths.second; // (a lambda below cannot capture structured bindings: clang 14)
    if (low != 2 && low != 3 && low != 4 && low != 5 && low != 6 && low != 8) fail(C, "--bits must be 2, 3, 4, 5, 6 or 8");
    if (o.group_size != 32 && o.group_size != 64 && o.group_size != 128)
        fail(C, "--group-size must be 32, 64 or 128");
    if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir)) fail(C, "output directory is the input directory");
    const HParams hp = load_config(in_dir);
    TensorStore store = TensorStore::open_dir(in_dir);
    const ModelWeights W = load_weights(store, hp);
    // Float tensors keep the checkpoint's dtype when it is f32, otherwise bf16 (MLX stores scales and biases in
    // the weight dtype).
    DType fdt = DType::BF16;
    if (const TensorRef* e = store.find(stored_name("model.language_model.norm.weight", W.scheme)))
        if (e->dtype == DType::F32) fdt = DType::F32;

    QuantizeReport rep;
    std::vector<TensorToWrite> out;
    nlohmann::json qb = {{"group_size", o.group_size}, {"bits", low}, {"mode", "affine"}};
    for_each_weight(W, hp, [&](const std::string& name, const std::vector<int64_t>& shape, const Tensor* t,
                               const WeightMatrix* m) {
        if (name == "lm_head.weight") return; // mlx-community files have no lm_head (tied)
        const std::string sn = stored_name(name, "mlx");
        if (t) {
            if (shape.size() == 4) { // OIHW → OHWI
                const int64_t O = shape[0], I = shape[1], H = shape[2], Wd = shape[3];
                std::vector<float> v(t->size());
                for (int64_t a = 0; a < O; ++a)
                    for (int64_t h = 0; h < H; ++h)
                        for (int64_t w = 0; w < Wd; ++w)
                            for (int64_t i = 0; i < I; ++i)
                                v[size_t(((a * H + h) * Wd + w) * I + i)] = t->data[size_t(((a * I + i) * H + h) * Wd + w)];
                out.push_back({sn, fdt, {O, H, Wd, I}, float_bytes(v.data(), v.size(), fdt)});
            } else {
                out.push_back({sn, fdt, shape, float_bytes(t->ptr(), t->size(), fdt)});
            }
            return;
        }
        // the decoder and the aligner's classifier, as MLX's predicate (everything but the audio tower)
        const bool decoder = name.rfind("model.language_model.", 0) == 0 || name == "score.weight";
        const int64_t rows = m->rows, cols = m->cols;
        const std::vector<float> v = m->to_f32();
        const int bits = more_bits(name, hp.text.n_layers) ? high : low;
        if ((decoder || o.encoder) && cols % o.group_size == 0 && (cols * bits) % 32 == 0) {
            const AffineQuantized q = quantize_affine(v.data(), rows, cols, bits, o.group_size);
            const std::string base = sn.substr(0, sn.size() - 7);
            if (!o.recipe.empty()) qb[base] = {{"group_size", o.group_size}, {"bits", bits}, {"mode", "affine"}};
            rep.high_bits += bits != low;
            out.push_back({sn, DType::U32, {rows, cols * bits / 32}, q.packed});
            out.push_back({base + ".scales", fdt, {rows, cols / o.group_size}, float_bytes(q.scales.data(), q.scales.size(), fdt)});
            out.push_back({base + ".biases", fdt, {rows, cols / o.group_size}, float_bytes(q.biases.data(), q.biases.size(), fdt)});
            ++rep.quantized;
        } else {
            out.push_back({sn, fdt, shape, float_bytes(v.data(), v.size(), fdt)});
            ++rep.kept_float;
        }
    });

    fs::create_directories(out_dir);
    write_safetensors(out_dir + "/model.safetensors", out, {{"format", "mlx"}});
    rep.bytes_out = size_t(fs::file_size(out_dir + "/model.safetensors"));

    nlohmann::json cfg = nlohmann::json::parse(read_text(in_dir + "/config.json"));
    cfg["quantization"] = qb;
    cfg["quantization_config"] = qb;
    {
        std::ofstream f(out_dir + "/config.json", std::ios::binary);
        f << cfg.dump(2) << "\n";
        if (!f) fail(C, out_dir + "/config.json: cannot write");
    }
    // Tokenizer and processor files travel along.
    for (const auto& e : fs::directory_iterator(in_dir)) {
        if (!e.is_regular_file()) continue;
        const std::string fn = e.path().filename().string(), ext = e.path().extension().string();
        if (fn == "config.json" || fn == "model.safetensors.index.json" || ext == ".safetensors") continue;
        if (ext == ".json" || ext == ".txt" || ext == ".model" || ext == ".jinja" || ext == ".py")
            fs::copy_file(e.path(), fs::path(out_dir) / fn, fs::copy_options::overwrite_existing);
    }
    return rep;
}

} // namespace qasr
