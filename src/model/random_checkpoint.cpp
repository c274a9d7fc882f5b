// Random checkpoint writer: preset configs (tiny / 0.6B / 1.7B real shapes), the splitmix-style generator,
// bf16 rounding, and the two stored-name layouts.
#include "model/random_checkpoint.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "model/weights.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace qasr {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t fnv1a64(const std::string& s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 0x100000001B3ull;
    }
    return h;
}

bool ends_with(const std::string& s, const std::string& suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

struct Preset {
    int enc_d, enc_layers, enc_heads, enc_ffn, conv_ch, out_dim;
    int dec_d, dec_layers, dec_heads, dec_kv, head_dim, inter, vocab;
    int classes = 0; // > 0: a ForcedAligner (spec §9) with this many timestamp classes
};

Preset preset(const std::string& name) {
    if (name == "tiny") return {64, 2, 4, 128, 16, 64, 64, 2, 4, 2, 32, 128, 151936};
    // like tiny with head_dim 64 (the smallest the fused CUDA decode kernels take)
    if (name == "small") return {64, 2, 4, 128, 16, 128, 128, 2, 4, 2, 64, 256, 151936};
    // widths the batched CUDA step's row products and attention take (multiples of 256, head_dim 128), small
    if (name == "wide") return {64, 2, 4, 128, 16, 256, 256, 2, 2, 1, 128, 512, 151936};
    if (name == "0.6b") return {896, 18, 14, 3584, 480, 1024, 1024, 28, 16, 8, 128, 3072, 151936};
    if (name == "1.7b") return {1024, 24, 16, 4096, 480, 2048, 2048, 28, 16, 8, 128, 6144, 151936};
    // Qwen3-ForcedAligner-0.6B (spec §1, §9): the 1.7B encoder, a 0.6B-sized decoder, vocab 152064, 5000 classes
    if (name == "aligner-tiny") return {64, 2, 4, 128, 16, 64, 64, 2, 4, 2, 32, 128, 152064, 5000};
    if (name == "aligner-0.6b") return {1024, 24, 16, 4096, 480, 1024, 1024, 28, 16, 8, 128, 3072, 152064, 5000};
    fail("random", "unknown preset '" + name + "' (tiny, small, wide, 0.6b, 1.7b, aligner-tiny, aligner-0.6b)");
}

} // namespace

float random_unit(uint64_t seed, const std::string& name, uint64_t i) {
    const uint64_t key = fnv1a64(name) ^ (seed * kGolden);
    uint64_t z = key + (i + 1) * kGolden;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z = z ^ (z >> 31);
    return float(z >> 40) / 8388608.0f - 1.0f;
}

float random_weight_value(uint64_t seed, const std::string& name, const std::vector<int64_t>& shape, uint64_t i) {
    const float u = random_unit(seed, name, i);
    if (shape.size() >= 2) {
        if (ends_with(name, "embed_tokens.weight")) return 0.1f * u;
        int64_t fan_in = 1;
        for (size_t k = 1; k < shape.size(); ++k) fan_in *= shape[k];
        return u * (1.0f / std::sqrt(float(fan_in)));
    }
    if (ends_with(name, "norm.weight") || ends_with(name, "layer_norm.weight") || ends_with(name, "ln_post.weight"))
        return 1.0f + 0.1f * u;
    return 0.1f * u;
}

std::string preset_config_json(const std::string& name, const std::string& layout) {
    const Preset p = preset(name);
    nlohmann::json audio = {{"num_mel_bins", 128},
                            {"d_model", p.enc_d},
                            {"encoder_layers", p.enc_layers},
                            {"encoder_attention_heads", p.enc_heads},
                            {"encoder_ffn_dim", p.enc_ffn},
                            {"downsample_hidden_size", p.conv_ch},
                            {"output_dim", p.out_dim},
                            {"n_window", 50},
                            {"n_window_infer", 800},
                            {"activation_function", "gelu"},
                            {"scale_embedding", false}};
    nlohmann::json text = {{"vocab_size", p.vocab},
                           {"hidden_size", p.dec_d},
                           {"intermediate_size", p.inter},
                           {"num_hidden_layers", p.dec_layers},
                           {"num_attention_heads", p.dec_heads},
                           {"num_key_value_heads", p.dec_kv},
                           {"head_dim", p.head_dim},
                           {"hidden_act", "silu"},
                           {"rms_norm_eps", 1e-6},
                           {"attention_bias", false},
                           {"max_position_embeddings", 65536}};
    nlohmann::json root;
    if (layout == "hf") {
        audio["max_position_embeddings"] = 13;
        audio["model_type"] = "qwen3_asr_encoder";
        text["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
        text["model_type"] = "qwen3";
        root = {{"model_type", "qwen3_asr"},
                {"architectures", {"Qwen3ASRForConditionalGeneration"}},
                {"audio_token_id", 151676},
                {"pad_token_id", 151645},
                {"eos_token_id", {151643, 151645}},
                {"tie_word_embeddings", true},
                {"audio_config", audio},
                {"text_config", text}};
    } else if (layout == "original") {
        audio["max_source_positions"] = 1500;
        audio["conv_chunksize"] = 500;
        text["rope_theta"] = 1000000.0;
        text["rope_scaling"] = {{"rope_type", "default"}, {"mrope_section", {24, 20, 20}}, {"interleaved", true},
                                {"mrope_interleaved", true}};
        text["tie_word_embeddings"] = true;
        root = {{"model_type", "qwen3_asr"},
                {"architectures", {"Qwen3ASRForConditionalGeneration"}},
                {"thinker_config",
                 {{"audio_token_id", 151676}, {"audio_start_token_id", 151669}, {"audio_end_token_id", 151670},
                  {"audio_config", audio}, {"text_config", text}}}};
    } else {
        fail("random", "unknown layout '" + layout + "' (hf, original)");
    }
    if (p.classes) { // the aligner's fields (spec §2.1, §2.2)
        text["tie_word_embeddings"] = false;
        root["tie_word_embeddings"] = false;
        root["timestamp_token_id"] = 151705;
        if (layout == "hf") {
            root["architectures"] = {"Qwen3ASRForTokenClassification"};
            root["num_labels"] = p.classes;
            root["token_classification_bias"] = false;
            root["text_config"] = text;
        } else {
            root["timestamp_segment_time"] = 80;
            root["thinker_config"]["model_type"] = "qwen3_forced_aligner";
            root["thinker_config"]["classify_num"] = p.classes;
            root["thinker_config"]["text_config"] = text;
        }
    }
    return root.dump(2);
}

void write_random_checkpoint(const std::string& out_dir, const std::string& preset_name, const std::string& layout,
                             uint64_t seed, const std::string& tokenizer_dir) {
    namespace fs = std::filesystem;
    const std::string cfg = preset_config_json(preset_name, layout);
    const HParams hp = parse_config_json(cfg, "preset " + preset_name);
    fs::create_directories(out_dir);
    std::ofstream(out_dir + "/config.json") << cfg;
    std::vector<TensorToWrite> tensors;
    const std::string scheme = layout == "hf" ? "hf" : "original";
    for (const auto& entry : weight_table(hp)) {
        const auto& name = entry.first; // not a structured binding: an OpenMP region cannot capture those (clang 14)
        const auto& shape = entry.second;
        TensorToWrite t{stored_name(name, scheme), DType::BF16, shape, {}};
        const size_t n = Tensor::count(shape);
        t.bytes.resize(n * 2);
#pragma omp parallel for schedule(static) // the generator is counter-based: any order gives the same bytes
        for (size_t i = 0; i < n; ++i) {
            const uint16_t h = f32_to_bf16(random_weight_value(seed, name, shape, i));
            t.bytes[2 * i] = uint8_t(h & 0xff);
            t.bytes[2 * i + 1] = uint8_t(h >> 8);
        }
        tensors.push_back(std::move(t));
        if (layout == "original" && !hp.aligner.classes && name == "model.language_model.embed_tokens.weight") {
            TensorToWrite head = tensors.back();
            head.name = stored_name("lm_head.weight", scheme);
            tensors.push_back(std::move(head));
        }
    }
    write_safetensors(out_dir + "/model.safetensors", tensors, {{"format", "pt"}});
    if (!tokenizer_dir.empty())
        for (const char* f : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"})
            if (fs::exists(tokenizer_dir + "/" + f))
                fs::copy_file(tokenizer_dir + "/" + f, out_dir + "/" + f, fs::copy_options::overwrite_existing);
}

} // namespace qasr
