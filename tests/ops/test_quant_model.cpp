// A quantized random-weight checkpoint (tiny preset) written by quantize_checkpoint() loads in the mlx-community
// layout, transcribes, and its logits stay close to the bf16 checkpoint's: relative RMS and argmax agreement over
// every prompt position are printed per width and bounded.
#include "audio/audio.hpp"
#include "core/dtype.hpp"
#include "io/safetensors.hpp"
#include "model/model.hpp"
#include "model/quantize_checkpoint.hpp"
#include "model/random_checkpoint.hpp"
#include "pipeline/session.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <unistd.h>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

struct LogitStats {
    double rel_rms = 0, argmax_agree = 0;
};

Tensor prompt_logits(const std::shared_ptr<const Model>& m, const std::vector<float>& audio) {
    Session s(m);
    TranscribeOptions o;
    const Tensor mel = s.mel(audio, o.min_samples);
    const Tensor rows = s.encode(mel);
    return s.prefill(s.prompt(rows.rows(), o), rows, true);
}

LogitStats compare(const Tensor& ref, const Tensor& q) {
    double num = 0, den = 0;
    int agree = 0;
    const int64_t P = ref.rows(), V = ref.cols();
    for (int64_t p = 0; p < P; ++p) {
        int64_t ar = 0, aq = 0;
        for (int64_t v = 0; v < V; ++v) {
            const double d = double(q.data[size_t(p * V + v)]) - ref.data[size_t(p * V + v)];
            num += d * d;
            den += double(ref.data[size_t(p * V + v)]) * ref.data[size_t(p * V + v)];
            if (ref.data[size_t(p * V + v)] > ref.data[size_t(p * V + ar)]) ar = v;
            if (q.data[size_t(p * V + v)] > q.data[size_t(p * V + aq)]) aq = v;
        }
        agree += ar == aq;
    }
    return {std::sqrt(num / den), double(agree) / double(P)};
}

} // namespace

TEST(QuantModel, TinyCheckpointQuantizesLoadsAndStaysClose) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string base = testing::TempDir() + "/qasr_quant_model_" + std::to_string(::getpid());
    fs::remove_all(base);
    write_random_checkpoint(base + "/bf16", "tiny", "hf", 3, QASR_TOKENIZER_DIR);
    const std::vector<float> audio = load_audio_file(std::string(QASR_SOURCE_DIR) + "/tests/data/audio/t1p3s.wav");
    const auto ref_model = Model::load(base + "/bf16");
    const Tensor ref = prompt_logits(ref_model, audio);

    struct Case {
        int bits;
        bool encoder;
        double max_rel_rms, min_agree;
        const char* recipe = "";
    };
    // Random weights give nearly flat logits, so argmax agreement is a weak signal; rel RMS is the main bound.
    // mixed_4_6 (mlx-lm's recipe; in 2 layers: layer 1's v_proj and down_proj at 6 bits) lies between 4 and 6 bits.
    double rms4 = 0;
    for (const Case c : {Case{8, false, 0.02, 0.9}, Case{6, false, 0.08, 0.6}, Case{4, false, 0.3, 0.3},
                         Case{8, true, 0.03, 0.9}, Case{4, false, 0.3, 0.3, "mixed_4_6"}}) {
        const std::string dir = base + "/q" + std::to_string(c.bits) + (c.encoder ? "e" : "") + c.recipe;
        QuantizeOptions o;
        o.bits = c.bits;
        o.encoder = c.encoder;
        o.recipe = c.recipe;
        const QuantizeReport rep = quantize_checkpoint(base + "/bf16", dir, o);
        EXPECT_GT(rep.quantized, 0);

        // mlx-community layout on disk
        TensorStore st = TensorStore::open_dir(dir);
        EXPECT_EQ(st.metadata["format"], "mlx");
        ASSERT_NE(st.find("model.embed_tokens.scales"), nullptr);
        EXPECT_EQ(st.find("model.embed_tokens.weight")->dtype, DType::U32);
        EXPECT_EQ(st.find("lm_head.weight"), nullptr);
        const TensorRef* conv = st.find("audio_tower.conv2d2.weight");
        ASSERT_NE(conv, nullptr);
        EXPECT_EQ(conv->shape[1], 3); // OHWI
        EXPECT_EQ(st.find("audio_tower.layers.0.fc1.scales") != nullptr, c.encoder);

        const auto m = Model::load(dir);
        EXPECT_EQ(m->weights.scheme, "mlx");
        EXPECT_EQ(m->weights.dec.layers[0].q.w.fmt, WFormat::Q);
        EXPECT_EQ(m->weights.dec.layers[0].q.w.bits, c.bits);
        EXPECT_EQ(m->weights.dec.embed.fmt, WFormat::Q);
        if (*c.recipe) { // per-module widths, from the config's per-module entries
            EXPECT_EQ(rep.high_bits, 2);
            EXPECT_EQ(m->hp.quant.modules.size(), size_t(rep.quantized));
            EXPECT_EQ(m->weights.dec.layers[1].v.w.bits, 6);
            EXPECT_EQ(m->weights.dec.layers[1].down.w.bits, 6);
            EXPECT_EQ(m->weights.dec.layers[1].q.w.bits, 4);
            EXPECT_EQ(m->weights.dec.layers[0].v.w.bits, 4);
        }
        const LogitStats s = compare(ref, prompt_logits(m, audio));
        std::printf("[quant-model] %d-bit%s%s: logits rel RMS %.4f, argmax agreement %.3f over %lld positions\n",
                    c.bits, c.encoder ? " (+encoder)" : "", *c.recipe ? (std::string(" ") + c.recipe).c_str() : "", s.rel_rms, s.argmax_agree, (long long)ref.rows());
        EXPECT_LT(s.rel_rms, c.max_rel_rms) << c.bits;
        EXPECT_GE(s.argmax_agree, c.min_agree) << c.bits;
        if (c.bits == 4 && !*c.recipe) rms4 = s.rel_rms;
        if (*c.recipe) {
            EXPECT_LT(s.rel_rms, rms4) << "some modules at 6 bits: closer than all at 4";
        }

        // it transcribes (greedy, token cap) without error
        Session sess(m);
        TranscribeOptions to;
        to.decode.max_new_tokens = 8;
        const TranscriptionResult r = sess.run(audio, to);
        EXPECT_FALSE(r.tokens.empty());
    }

    // Re-quantizing a dequantized 8-bit checkpoint is stable: every weight moves by at most one step (half a step
    // of rounding plus the bf16 rounding of the new scale times codes up to 255).
    const std::string again = base + "/q8_again";
    QuantizeOptions o8;
    o8.bits = 8;
    quantize_checkpoint(base + "/q8", again, o8);
    const auto a = Model::load(base + "/q8"), b = Model::load(again);
    const WeightMatrix& wa = a->weights.dec.layers[1].down.w;
    const WeightMatrix& wb = b->weights.dec.layers[1].down.w;
    const std::vector<float> va = wa.to_f32(), vb = wb.to_f32();
    float max_scale = 0;
    for (int64_t i = 0; i < wa.rows * wa.cols / wa.group_size; ++i)
        max_scale = std::max(max_scale, std::fabs(bf16_to_f32(wa.scales[i])));
    for (size_t i = 0; i < va.size(); ++i) ASSERT_LE(std::fabs(va[i] - vb[i]), 1.05f * max_scale + 1e-6f) << i;
}

// MLX-quantized weights under the -hf names (packs made from Qwen3-ASR-0.6B-hf: the decoder's linears and embedding
// quantized as model.language_model.*, the audio tower float as model.audio_tower.* with its OIHW convolutions and
// the projector as model.multi_modal_projector.*): the loader decides per module by its .scales, whatever the
// naming, so the checkpoint gives exactly the mlx-layout checkpoint's logits.
TEST(QuantModel, HfNamedQuantizedCheckpointEqualsMlxLayout) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string base = testing::TempDir() + "/qasr_quant_hf_" + std::to_string(::getpid());
    fs::remove_all(base);
    write_random_checkpoint(base + "/bf16", "tiny", "hf", 3, QASR_TOKENIZER_DIR);
    QuantizeOptions o;
    o.bits = 8;
    quantize_checkpoint(base + "/bf16", base + "/q8", o);
    // the float tensors from the -hf checkpoint, the quantized modules' three tensors from the mlx one, renamed
    const std::string dir = base + "/q8hf";
    fs::create_directories(dir);
    for (auto& f : fs::directory_iterator(base + "/q8"))
        if (f.path().filename() != "model.safetensors") fs::copy_file(f.path(), dir + "/" + f.path().filename().string());
    auto hf_name = [](const std::string& n) {
        for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
                 {"audio_tower.proj1.", "model.multi_modal_projector.linear_1."},
                 {"audio_tower.proj2.", "model.multi_modal_projector.linear_2."},
                 {"audio_tower.", "model.audio_tower."},
                 {"model.", "model.language_model."}})
            if (n.rfind(from, 0) == 0) return to + n.substr(from.size());
        return n;
    };
    TensorStore q = TensorStore::open_dir(base + "/q8"), f = TensorStore::open_dir(base + "/bf16");
    std::vector<TensorToWrite> out;
    std::set<std::string> quantized; // -hf names of the quantized modules' .weight
    for (const auto& kv : q.tensors()) {
        const std::string& n = kv.first;
        const size_t dot = n.rfind('.');
        const std::string mod = n.substr(0, dot);
        if (!q.find(mod + ".scales")) continue; // a float tensor: from the -hf checkpoint below
        const TensorRef& t = kv.second;
        out.push_back({hf_name(n), t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
        if (n.substr(dot) == ".weight") quantized.insert(hf_name(n));
    }
    ASSERT_GT(quantized.size(), 10u);
    for (const auto& kv : f.tensors()) {
        if (quantized.count(kv.first)) continue;
        const TensorRef& t = kv.second;
        out.push_back({kv.first, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    }
    write_safetensors(dir + "/model.safetensors", out);
    const auto hf = Model::load(dir), mlx = Model::load(base + "/q8");
    EXPECT_EQ(hf->weights.scheme, "hf");
    EXPECT_EQ(hf->weights.dec.layers[0].q.w.fmt, WFormat::Q);
    EXPECT_EQ(hf->weights.dec.embed.fmt, WFormat::Q);
    const std::vector<float> audio = load_audio_file(std::string(QASR_SOURCE_DIR) + "/tests/data/audio/t1p3s.wav");
    const Tensor a = prompt_logits(hf, audio), b = prompt_logits(mlx, audio);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.data[i], b.data[i]) << i;
    fs::remove_all(base);
}
