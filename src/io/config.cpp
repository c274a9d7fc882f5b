// config.json → HParams. Accepts both spellings the spec lists (encoder_attention_heads / num_attention_heads,
// rope_theta / rope_parameters.rope_theta) and rejects anything it cannot run (activations, absurd sizes).
#include "io/config.hpp"

#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace qasr {
namespace {

using nlohmann::json;

struct Reader {
    std::vector<std::string> problems;

    const json* get(const json& obj, const std::string& path, std::initializer_list<const char*> keys) {
        for (const char* k : keys)
            if (obj.is_object() && obj.contains(k) && !obj[k].is_null()) return &obj[k];
        std::string names;
        for (const char* k : keys) names += (names.empty() ? "" : " or ") + path + std::string(k);
        problems.push_back("missing " + names);
        return nullptr;
    }
    int integer(const json& obj, const std::string& path, std::initializer_list<const char*> keys, int lo, int hi) {
        const json* v = get(obj, path, keys);
        if (!v) return 0;
        if (!v->is_number_integer()) {
            problems.push_back(path + *keys.begin() + " must be an integer, got " + v->dump());
            return 0;
        }
        long long x = v->get<long long>();
        if (x < lo || x > hi) {
            problems.push_back(path + *keys.begin() + " = " + std::to_string(x) + " is outside [" +
                               std::to_string(lo) + ", " + std::to_string(hi) + "]");
            return 0;
        }
        return int(x);
    }
    double number(const json& obj, const std::string& path, const char* key, double lo, double hi) {
        const json* v = get(obj, path, {key});
        if (!v) return 0;
        if (!v->is_number()) {
            problems.push_back(path + key + " must be a number, got " + v->dump());
            return 0;
        }
        double x = v->get<double>();
        if (!(x > lo && x < hi)) problems.push_back(path + key + " = " + v->dump() + " is out of range");
        return x;
    }
    void expect_string(const json& obj, const std::string& path, const char* key, const std::string& want) {
        if (!obj.contains(key)) return; // activation names are optional in some exports; default is the reference
        if (!obj[key].is_string() || obj[key].get<std::string>() != want)
            problems.push_back(path + key + " = " + obj[key].dump() + " is not supported (expected \"" + want + "\")");
    }
};

std::optional<int> opt_int(const json& obj, const char* key) {
    if (obj.is_object() && obj.contains(key) && obj[key].is_number_integer()) return obj[key].get<int>();
    return std::nullopt;
}

bool src_has_bias(const json& obj) {
    return obj.is_object() && obj.contains("token_classification_bias") && obj["token_classification_bias"].is_boolean() &&
           obj["token_classification_bias"].get<bool>();
}

} // namespace

int AudioHParams::freq_after_conv() const {
    int f = n_mels;
    for (int i = 0; i < 3; ++i) f = (f + 1) / 2;
    return f;
}

HParams parse_config_json(const std::string& json_text, const std::string& what) {
    json root;
    try {
        root = json::parse(json_text);
    } catch (const std::exception& e) {
        fail("config", what + ": not valid JSON: " + e.what());
    }
    if (!root.is_object()) fail("config", what + ": not a JSON object");
    HParams hp;
    const json* top = &root;
    std::string prefix;
    if (root.contains("thinker_config")) {
        hp.layout = "original";
        top = &root["thinker_config"];
        prefix = "thinker_config.";
        if (!top->is_object()) fail("config", what + ": thinker_config is not an object");
    } else {
        hp.layout = "hf";
    }
    if (!top->contains("audio_config") || !top->contains("text_config") || !(*top)["audio_config"].is_object() ||
        !(*top)["text_config"].is_object())
        fail("config", what + ": no " + prefix + "audio_config/text_config objects — not a Qwen3-ASR config");
    const json& a = (*top)["audio_config"];
    const json& t = (*top)["text_config"];
    const std::string ap = prefix + "audio_config.", tp = prefix + "text_config.";

    Reader r;
    AudioHParams& A = hp.audio;
    A.n_mels = r.integer(a, ap, {"num_mel_bins"}, 8, 1024);
    A.d_model = r.integer(a, ap, {"d_model"}, 1, 1 << 16);
    A.n_layers = r.integer(a, ap, {"encoder_layers"}, 1, 512);
    A.n_heads = r.integer(a, ap, {"encoder_attention_heads", "num_attention_heads"}, 1, 1024);
    A.ffn_dim = r.integer(a, ap, {"encoder_ffn_dim"}, 1, 1 << 18);
    A.conv_channels = r.integer(a, ap, {"downsample_hidden_size"}, 1, 1 << 14);
    A.output_dim = r.integer(a, ap, {"output_dim"}, 1, 1 << 16);
    A.n_window = r.integer(a, ap, {"n_window"}, 1, 1 << 14);
    A.n_window_infer = r.integer(a, ap, {"n_window_infer"}, 1, 1 << 20);
    r.expect_string(a, ap, "activation_function", "gelu");
    if (A.d_model && A.n_heads && A.d_model % A.n_heads)
        r.problems.push_back(ap + "d_model " + std::to_string(A.d_model) + " is not divisible by the head count");
    if (A.n_window && A.n_window_infer && A.n_window_infer % (2 * A.n_window))
        r.problems.push_back(ap + "n_window_infer must be a multiple of 2*n_window");
    if (a.contains("scale_embedding") && a["scale_embedding"].is_boolean() && a["scale_embedding"].get<bool>())
        r.problems.push_back(ap + "scale_embedding = true is not supported");

    TextHParams& T = hp.text;
    T.vocab_size = r.integer(t, tp, {"vocab_size"}, 1, 1 << 22);
    T.hidden = r.integer(t, tp, {"hidden_size"}, 1, 1 << 16);
    T.intermediate = r.integer(t, tp, {"intermediate_size"}, 1, 1 << 18);
    T.n_layers = r.integer(t, tp, {"num_hidden_layers"}, 1, 512);
    T.n_heads = r.integer(t, tp, {"num_attention_heads"}, 1, 1024);
    T.n_kv_heads = r.integer(t, tp, {"num_key_value_heads"}, 1, 1024);
    T.head_dim = r.integer(t, tp, {"head_dim"}, 2, 1024);
    T.rms_eps = float(r.number(t, tp, "rms_norm_eps", 0.0, 1.0));
    r.expect_string(t, tp, "hidden_act", "silu");
    if (t.contains("attention_bias") && t["attention_bias"].is_boolean() && t["attention_bias"].get<bool>())
        r.problems.push_back(tp + "attention_bias = true is not supported");
    if (T.head_dim % 2) r.problems.push_back(tp + "head_dim must be even for RoPE");
    if (T.n_heads && T.n_kv_heads && T.n_heads % T.n_kv_heads)
        r.problems.push_back(tp + "num_attention_heads must be a multiple of num_key_value_heads");
    if (t.contains("rope_theta") && t["rope_theta"].is_number()) {
        T.rope_theta = t["rope_theta"].get<double>();
    } else if (t.contains("rope_parameters") && t["rope_parameters"].is_object() &&
               t["rope_parameters"].contains("rope_theta") && t["rope_parameters"]["rope_theta"].is_number()) {
        T.rope_theta = t["rope_parameters"]["rope_theta"].get<double>();
        const auto& rp = t["rope_parameters"];
        if (rp.contains("rope_type") && rp["rope_type"].is_string() && rp["rope_type"] != "default")
            r.problems.push_back(tp + "rope_parameters.rope_type " + rp["rope_type"].dump() + " is not supported");
    } else {
        r.problems.push_back("missing " + tp + "rope_theta (or " + tp + "rope_parameters.rope_theta)");
    }
    if (T.rope_theta != 0 && !(T.rope_theta > 1.0 && T.rope_theta < 1e12))
        r.problems.push_back(tp + "rope_theta is out of range");
    if (t.contains("max_position_embeddings")) // optional: requests whose prompt + token cap exceed it are refused
        T.max_positions = r.integer(t, tp, {"max_position_embeddings"}, 1, 1 << 24);
    if (t.contains("tie_word_embeddings") && t["tie_word_embeddings"].is_boolean())
        T.tie_word_embeddings = t["tie_word_embeddings"].get<bool>();
    else if (root.contains("tie_word_embeddings") && root["tie_word_embeddings"].is_boolean())
        T.tie_word_embeddings = root["tie_word_embeddings"].get<bool>();

    hp.audio_token_id = opt_int(*top, "audio_token_id");
    hp.audio_start_token_id = opt_int(*top, "audio_start_token_id");
    hp.audio_end_token_id = opt_int(*top, "audio_end_token_id");
    for (const json* src : std::initializer_list<const json*>{&root, top}) {
        if (!hp.eos_token_ids.empty()) break;
        if (src->contains("eos_token_id")) {
            const json& e = (*src)["eos_token_id"];
            if (e.is_number_integer()) hp.eos_token_ids.push_back(e.get<int>());
            if (e.is_array())
                for (const auto& x : e)
                    if (x.is_number_integer()) hp.eos_token_ids.push_back(x.get<int>());
        }
    }
    // The ForcedAligner: original layout thinker_config.classify_num (model_type "qwen3_forced_aligner"); -hf layout
    // architectures ["Qwen3ASRForTokenClassification"] with num_labels (saved as id2label).
    bool token_classification = false;
    if (root.contains("architectures") && root["architectures"].is_array())
        for (const auto& x : root["architectures"])
            if (x.is_string() && x.get<std::string>().find("ForTokenClassification") != std::string::npos)
                token_classification = true;
    if (top->contains("model_type") && (*top)["model_type"].is_string() &&
        (*top)["model_type"].get<std::string>().find("forced_aligner") != std::string::npos)
        token_classification = true;
    for (const json* src : std::initializer_list<const json*>{top, &root}) {
        if (hp.aligner.classes) break;
        if (src->contains("classify_num")) {
            hp.aligner.classes = r.integer(*src, src == top ? prefix : "", {"classify_num"}, 2, 1 << 20);
            token_classification = true;
        } else if (token_classification && src->contains("num_labels")) {
            hp.aligner.classes = r.integer(*src, src == top ? prefix : "", {"num_labels"}, 2, 1 << 20);
        } else if (token_classification && src->contains("id2label") && (*src)["id2label"].is_object()) {
            hp.aligner.classes = int(std::min<size_t>((*src)["id2label"].size(), size_t(1) << 21));
            if (hp.aligner.classes < 2 || hp.aligner.classes > (1 << 20))
                r.problems.push_back("id2label has " + std::to_string(hp.aligner.classes) + " labels (expected 2 .. 2^20)");
        }
    }
    if (token_classification) {
        if (!hp.aligner.classes)
            r.problems.push_back("a token-classification (forced aligner) config without classify_num or num_labels");
        for (const json* src : std::initializer_list<const json*>{&root, top}) {
            const std::string p = src == top ? prefix : "";
            if (src->contains("timestamp_token_id"))
                hp.aligner.timestamp_token_id = r.integer(*src, p, {"timestamp_token_id"}, 0, 1 << 22);
            if (src->contains("timestamp_segment_time"))
                hp.aligner.segment_ms = r.number(*src, p, "timestamp_segment_time", 0.0, 1e5);
        }
        if (src_has_bias(root) || src_has_bias(*top))
            r.problems.push_back("token_classification_bias = true is not supported");
    }
    for (const char* qk : {"quantization", "quantization_config"}) {
        if (!root.contains(qk) || !root[qk].is_object()) continue;
        const json& q = root[qk];
        const std::string p = std::string(qk) + ".";
        hp.quant.bits = r.integer(q, p, {"bits"}, 1, 8);
        hp.quant.group_size = r.integer(q, p, {"group_size"}, 1, 1 << 16);
        hp.quant.mode = q.contains("mode") && q["mode"].is_string() ? q["mode"].get<std::string>() : "affine";
        for (const auto& [key, v] : q.items()) { // per-module entries: {"bits", "group_size"[, "mode"]} or false
            if (v.is_boolean() && !v.get<bool>()) {
                hp.quant.modules[key] = {};
            } else if (v.is_object()) {
                QuantHParams::Module m;
                m.bits = r.integer(v, p + key + ".", {"bits"}, 1, 8);
                m.group_size = r.integer(v, p + key + ".", {"group_size"}, 1, 1 << 16);
                m.mode = v.contains("mode") && v["mode"].is_string() ? v["mode"].get<std::string>() : hp.quant.mode;
                hp.quant.modules[key] = m;
            }
        }
        break;
    }

    if (!r.problems.empty()) {
        std::string msg = what + ": " + std::to_string(r.problems.size()) + " problem(s):";
        for (const auto& p : r.problems) msg += "\n  " + p;
        fail("config", msg);
    }
    return hp;
}

HParams load_config(const std::string& model_dir) {
    const std::string path = model_dir + "/config.json";
    std::ifstream in(path);
    if (!in) fail("config", path + ": cannot open (is this a Qwen3-ASR model directory?)");
    std::stringstream ss;
    ss << in.rdbuf();
    return parse_config_json(ss.str(), path);
}

} // namespace qasr
