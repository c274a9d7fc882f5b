// Loading tests: safetensors validation (hostile headers, truncation), config parsing of both layouts and the
// errors for wrong configs, the weight table (missing/mis-shaped tensors reported together), MLX quantization.
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "model/quant.hpp"
#include "model/quantize_checkpoint.hpp"
#include "model/random_checkpoint.hpp"
#include "model/weights.hpp"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <unistd.h>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> st_bytes(const std::string& header, size_t data_bytes) {
    std::vector<uint8_t> b(8);
    for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
    b.insert(b.end(), header.begin(), header.end());
    b.resize(b.size() + data_bytes, 0);
    return b;
}

std::string expect_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    ADD_FAILURE() << "no qasr::Error thrown";
    return "";
}

} // namespace

TEST(Safetensors, ParsesAndValidates) {
    auto ok = st_bytes(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"format":"pt"}})", 16);
    std::map<std::string, std::string> meta;
    auto t = parse_safetensors(ok.data(), ok.size(), "t", &meta);
    EXPECT_EQ(t.at("a").shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(meta["format"], "pt");
    const char* bad[] = {
        R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})",           // size mismatch
        R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,32]}})",           // past the end
        R"({"a":{"dtype":"Q4","shape":[2,2],"data_offsets":[0,16]}})",            // dtype
        R"({"a":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})",          // negative dim
        R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", // overflow
        R"({"a":{"dtype":"F32","shape":[2,2]}})",                                  // no offsets
        R"([1,2,3])", R"({not json)"};
    for (const char* h : bad) {
        auto b = st_bytes(h, 16);
        EXPECT_THROW(parse_safetensors(b.data(), b.size(), "t"), Error) << h;
    }
    EXPECT_THROW(parse_safetensors(ok.data(), 5, "t"), Error);
    EXPECT_NE(expect_error([&] { parse_safetensors(ok.data(), ok.size() - 4, "t"); }).find("truncated"), std::string::npos);
    std::vector<uint8_t> huge(16, 0xff);
    EXPECT_THROW(parse_safetensors(huge.data(), huge.size(), "t"), Error);
}

TEST(Safetensors, WriterAlignsTensorsToCacheLines) {
    const std::string dir = (fs::temp_directory_path() / ("qasr_align_" + std::to_string(getpid()))).string();
    fs::create_directories(dir);
    std::vector<TensorToWrite> ts;
    std::mt19937 rng(7);
    // odd-sized tensors between 64-multiples: the multiples must still land on 64-byte boundaries
    for (const int64_t n : {3, 64, 5, 128, 1, 1024, 7, 96}) {
        TensorToWrite t{"t" + std::to_string(ts.size()), DType::F32, {n}, std::vector<uint8_t>(size_t(n) * 4)};
        for (auto& b : t.bytes) b = uint8_t(rng());
        ts.push_back(t);
    }
    write_safetensors(dir + "/x.safetensors", ts, {{"format", "pt"}});
    const TensorStore st = TensorStore::open_file(dir + "/x.safetensors");
    ASSERT_EQ(st.tensors().size(), ts.size());
    const uint8_t* base = nullptr;
    for (const auto& [name, r] : st.tensors()) {
        if (!base || r.data < base) base = r.data; // the data section's first byte
    }
    std::ifstream f(dir + "/x.safetensors", std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    EXPECT_EQ((8 + n) % kTensorAlign, 0u) << "data section offset " << 8 + n;
    for (const auto& t : ts) {
        const TensorRef* r = st.find(t.name);
        ASSERT_NE(r, nullptr) << t.name;
        ASSERT_EQ(r->nbytes, t.bytes.size());
        EXPECT_EQ(std::memcmp(r->data, t.bytes.data(), t.bytes.size()), 0) << t.name; // round trip
        if (t.bytes.size() % kTensorAlign == 0) { // aligned within the file, and the mapping is page-aligned
            EXPECT_EQ((8 + n + size_t(r->data - base)) % kTensorAlign, 0u) << t.name;
        }
    }
    EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % kTensorAlign, 0u) << "mapped data section";
    fs::remove_all(dir);
}

TEST(Safetensors, FuzzedHeadersNeverCrash) {
    const std::string h = R"({"w":{"dtype":"BF16","shape":[3,5],"data_offsets":[0,30]},"b":{"dtype":"F32","shape":[1],"data_offsets":[30,34]}})";
    auto base = st_bytes(h, 34);
    std::mt19937 rng(11);
    for (int trial = 0; trial < 5000; ++trial) {
        auto b = base;
        const int flips = 1 + int(rng() % 6);
        for (int k = 0; k < flips; ++k) b[rng() % b.size()] = uint8_t(rng());
        if (rng() % 4 == 0) b.resize(rng() % b.size());
        try {
            auto t = parse_safetensors(b.data(), b.size(), "fuzz");
            for (auto& [n, r] : t) EXPECT_LE(r.data + r.nbytes, b.data() + b.size());
        } catch (const Error&) {
        }
    }
}

TEST(Config, BothLayoutsParseToTheSameHyperparameters) {
    for (const char* preset : {"tiny", "0.6b", "1.7b"}) {
        HParams h = parse_config_json(preset_config_json(preset, "hf"), "hf");
        HParams o = parse_config_json(preset_config_json(preset, "original"), "orig");
        EXPECT_EQ(h.layout, "hf");
        EXPECT_EQ(o.layout, "original");
        EXPECT_EQ(h.audio.d_model, o.audio.d_model);
        EXPECT_EQ(h.text.head_dim, o.text.head_dim);
        EXPECT_EQ(h.text.rope_theta, 1e6);
        EXPECT_EQ(o.text.rope_theta, 1e6);
    }
    HParams p = parse_config_json(preset_config_json("0.6b", "hf"), "x");
    EXPECT_EQ(p.audio.freq_after_conv(), 16);
    EXPECT_EQ(p.text.n_kv_heads, 8);
}

TEST(Config, WrongConfigsListEveryProblem) {
    auto j = nlohmann::json::parse(preset_config_json("tiny", "hf"));
    j["text_config"].erase("rope_parameters");
    j["text_config"].erase("head_dim");
    j["audio_config"]["d_model"] = -5;
    j["text_config"]["hidden_act"] = "relu";
    const std::string msg = expect_error([&] { parse_config_json(j.dump(), "cfg"); });
    EXPECT_NE(msg.find("rope_theta"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim"), std::string::npos) << msg;
    EXPECT_NE(msg.find("d_model"), std::string::npos) << msg;
    EXPECT_NE(msg.find("hidden_act"), std::string::npos) << msg;
    EXPECT_THROW(parse_config_json("{}", "x"), Error);
    EXPECT_THROW(parse_config_json("nope", "x"), Error);
}

TEST(Weights, TableReportsMissingAndMisshapedTogether) {
    const std::string dir = testing::TempDir() + "/qasr_weights_test_" + std::to_string(::getpid());
    fs::remove_all(dir);
    write_random_checkpoint(dir, "tiny", "hf", 1, "");
    const HParams hp = load_config(dir);
    {
        TensorStore st = TensorStore::open_dir(dir);
        ModelWeights w = load_weights(st, hp);
        EXPECT_EQ(w.scheme, "hf");
        EXPECT_EQ(w.dec.embed.dim(0), 151936);
        EXPECT_TRUE(w.dec.lm_head.empty()); // tied
        // values follow the documented generator
        const float want = bf16_to_f32(f32_to_bf16(random_weight_value(
            1, "model.language_model.norm.weight", {64}, 3)));
        EXPECT_EQ(w.dec.norm.data[3], want);
    }
    // Rewrite with one tensor dropped and one mis-shaped.
    TensorStore st = TensorStore::open_dir(dir);
    std::vector<TensorToWrite> out;
    for (const auto& [name, t] : st.tensors()) {
        if (name == "model.audio_tower.ln_post.bias") continue;
        TensorToWrite w{name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
        if (name == "model.language_model.layers.1.mlp.up_proj.weight") w.shape = {t.shape[1], t.shape[0]};
        out.push_back(std::move(w));
    }
    const std::string bad = dir + "_bad";
    fs::create_directories(bad);
    fs::copy_file(dir + "/config.json", bad + "/config.json", fs::copy_options::overwrite_existing);
    write_safetensors(bad + "/model.safetensors", out);
    TensorStore sb = TensorStore::open_dir(bad);
    const std::string msg = expect_error([&] { load_weights(sb, hp); });
    EXPECT_NE(msg.find("missing model.audio_tower.ln_post.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layers.1.mlp.up_proj.weight: expected [128,64], got [64,128]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 problem(s)"), std::string::npos) << msg;
}

TEST(Weights, OriginalLayoutHasSameValues) {
    const std::string a = testing::TempDir() + "/qasr_w_hf_" + std::to_string(::getpid()),
                      b = testing::TempDir() + "/qasr_w_orig_" + std::to_string(::getpid());
    write_random_checkpoint(a, "tiny", "hf", 5, "");
    write_random_checkpoint(b, "tiny", "original", 5, "");
    TensorStore sa = TensorStore::open_dir(a), sb = TensorStore::open_dir(b);
    ModelWeights wa = load_weights(sa, load_config(a)), wb = load_weights(sb, load_config(b));
    EXPECT_EQ(wb.scheme, "original");
    EXPECT_EQ(wa.enc.proj2.w.to_f32(), wb.enc.proj2.w.to_f32());
    EXPECT_EQ(wa.dec.layers[1].down.w.to_f32(), wb.dec.layers[1].down.w.to_f32());
    EXPECT_EQ(stored_name("model.multi_modal_projector.linear_1.weight", "original"), "thinker.audio_tower.proj1.weight");
    EXPECT_EQ(stored_name("model.language_model.norm.weight", "mlx"), "model.norm.weight");
}

TEST(Quant, SixBitWorkedExample) {
    const uint8_t bytes[] = {0x05, 0x1F, 0x4A};
    EXPECT_EQ(affine_code(bytes, 0, 6), 5u);
    EXPECT_EQ(affine_code(bytes, 1, 6), 60u);
    EXPECT_EQ(affine_code(bytes, 2, 6), 33u);
    EXPECT_EQ(affine_code(bytes, 3, 6), 18u);
    const float s = bf16_to_f32(0x3C49), b = bf16_to_f32(0xBEC8);
    EXPECT_NEAR(s * 5 + b, -0.329285, 1e-6);
    EXPECT_NEAR(s * 60 + b, 0.345459, 1e-6);
}

TEST(Quant, RoundTripWithinAffineBound) {
    std::mt19937 rng(2);
    std::normal_distribution<float> n(0, 0.05f);
    const int64_t out = 3, in = 128;
    std::vector<float> w(size_t(out * in));
    for (auto& v : w) v = n(rng);
    for (int bits : {2, 3, 4, 5, 6, 8}) {
        AffineQuantized q = quantize_affine(w.data(), out, in, bits, 64);
        for (int64_t r = 0; r < out; ++r)
            for (int64_t j = 0; j < in; ++j) {
                const size_t g = size_t(r * (in / 64) + j / 64);
                const float sc = q.scales[g], bi = q.biases[g], x = w[size_t(r * in + j)];
                const float deq = sc * float(affine_code(q.packed.data() + size_t(r * in * bits / 8), j, bits)) + bi;
                const float lo = std::min(bi, bi + sc * float((1 << bits) - 1)), hi = std::max(bi, bi + sc * float((1 << bits) - 1));
                if (x >= lo && x <= hi) // inside the grid: nearest grid point
                    EXPECT_LE(std::fabs(deq - x), std::fabs(sc) * 0.5f + 1e-6f) << bits;
                else // outside (the zero-exact edge rescaling can shrink the grid): clamped to the end
                    EXPECT_NEAR(deq, x < lo ? lo : hi, 1e-6f) << bits;
            }
    }
}

TEST(RandomCheckpoint, GeneratorCheckValues) { // docs/reference-dumps.md, shared with scripts/reference.py
    const float u[] = {0.80250144f, 0.33164084f, -0.852546334f, -0.589720607f};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(random_unit(1, "a", uint64_t(i)), u[i]);
    auto bf = [](const char* name, std::vector<int64_t> shape, uint64_t i) {
        return f32_to_bf16(random_weight_value(1, name, shape, i));
    };
    EXPECT_EQ(bf("model.audio_tower.conv2d2.weight", {480, 480, 3, 3}, 0), 0xBBAC);
    EXPECT_EQ(bf("model.audio_tower.conv2d2.weight", {480, 480, 3, 3}, 2), 0x3C1D);
    EXPECT_EQ(bf("model.language_model.embed_tokens.weight", {151936, 1024}, 1), 0xBDBF);
    EXPECT_EQ(bf("model.language_model.layers.0.self_attn.q_norm.weight", {128}, 2), 0x3F8B);
    EXPECT_EQ(bf("model.multi_modal_projector.linear_2.weight", {2048, 1024}, 1), 0xBB64);
    EXPECT_EQ(bf("model.language_model.norm.weight", {1024}, 0), 0x3F7B);
    EXPECT_EQ(bf("model.audio_tower.conv2d1.bias", {480}, 2), 0x3CB5);
}

namespace {

// Rewrites a checkpoint's tensors through `edit` into `dst` as `n_shards` files + model.safetensors.index.json.
void rewrite(const std::string& src, const std::string& dst, int n_shards, DType float_dtype) {
    fs::create_directories(dst);
    fs::copy_file(src + "/config.json", dst + "/config.json", fs::copy_options::overwrite_existing);
    TensorStore st = TensorStore::open_dir(src);
    std::vector<std::vector<TensorToWrite>> shards(static_cast<size_t>(n_shards));
    nlohmann::json wmap = nlohmann::json::object();
    size_t k = 0;
    for (const auto& [name, t] : st.tensors()) {
        std::vector<float> f(t.numel());
        to_f32(t, f.data());
        TensorToWrite w{name, float_dtype, t.shape, {}};
        for (float v : f) {
            if (float_dtype == DType::F32) {
                const auto* b = reinterpret_cast<const uint8_t*>(&v);
                w.bytes.insert(w.bytes.end(), b, b + 4);
            } else { // F16: bf16-valued weights of this size are exactly representable only approximately; fine
                uint32_t bits;
                std::memcpy(&bits, &v, 4);
                const uint32_t sign = (bits >> 16) & 0x8000u;
                const int e = int((bits >> 23) & 0xff) - 127 + 15;
                uint16_t h = e <= 0 ? uint16_t(sign) : e >= 31 ? uint16_t(sign | 0x7c00u)
                                                               : uint16_t(sign | uint32_t(e) << 10 | ((bits >> 13) & 0x3ffu));
                w.bytes.push_back(uint8_t(h & 0xff));
                w.bytes.push_back(uint8_t(h >> 8));
            }
        }
        const size_t s = k++ % size_t(n_shards);
        const std::string file = n_shards == 1 ? "model.safetensors"
                                               : "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(n_shards) + ".safetensors";
        wmap[name] = file;
        shards[s].push_back(std::move(w));
    }
    for (int s = 0; s < n_shards; ++s) {
        const std::string file = n_shards == 1 ? "model.safetensors"
                                               : "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(n_shards) + ".safetensors";
        write_safetensors(dst + "/" + file, shards[size_t(s)]);
    }
    if (n_shards > 1) std::ofstream(dst + "/model.safetensors.index.json") << nlohmann::json{{"weight_map", wmap}}.dump();
}

} // namespace

TEST(Weights, ShardedF32AndF16CheckpointsLoad) {
    const std::string base = testing::TempDir() + "/qasr_shard_base_" + std::to_string(::getpid());
    write_random_checkpoint(base, "tiny", "original", 3, "");
    const HParams hp = load_config(base);
    TensorStore sb = TensorStore::open_dir(base);
    const ModelWeights ref = load_weights(sb, hp);
    const std::string f32 = testing::TempDir() + "/qasr_shard_f32_" + std::to_string(::getpid());
    rewrite(base, f32, 3, DType::F32);
    TensorStore s32 = TensorStore::open_dir(f32);
    EXPECT_EQ(s32.tensors().size(), sb.tensors().size());
    const ModelWeights w32 = load_weights(s32, hp);
    EXPECT_EQ(w32.dec.layers[1].gate.w.to_f32(), ref.dec.layers[1].gate.w.to_f32()); // bf16 → f32 is exact
    EXPECT_EQ(w32.enc.conv2_w.data, ref.enc.conv2_w.data);
    const std::string f16 = testing::TempDir() + "/qasr_shard_f16_" + std::to_string(::getpid());
    rewrite(base, f16, 2, DType::F16);
    TensorStore s16 = TensorStore::open_dir(f16);
    const ModelWeights w16 = load_weights(s16, hp);
    const std::vector<float> a16 = w16.enc.proj1.w.to_f32(), aref = ref.enc.proj1.w.to_f32();
    ASSERT_EQ(a16.size(), aref.size());
    for (size_t i = 0; i < aref.size(); ++i) ASSERT_NEAR(a16[i], aref[i], std::fabs(aref[i]) * 1e-3 + 6.2e-5); // the test's converter flushes f16 subnormals
    // An index that names a missing shard or a tensor that is not in its shard is a clear error.
    std::ofstream(f16 + "/model.safetensors.index.json") << R"({"weight_map":{"x":"../evil.safetensors"}})";
    EXPECT_THROW(TensorStore::open_dir(f16), Error);
    std::ofstream(f16 + "/model.safetensors.index.json") << R"({"weight_map":{"ghost":"model-00001-of-00002.safetensors"}})";
    EXPECT_THROW(TensorStore::open_dir(f16), Error);
    for (const auto& d : {base, f32, f16}) fs::remove_all(d);
}

// mlx-lm's mixed-precision recipes (formats.md §1.6): a module's own entry in the quantization block gives its bits
// and group size ({"bits", "group_size"}), or `false` for a float module; the rest follow the global entry.
TEST(Quant, MixedPrecisionCheckpointLoadsPerModuleEntries) {
    const std::string base = testing::TempDir() + "/qasr_mixed_base_" + std::to_string(::getpid());
    write_random_checkpoint(base, "tiny", "hf", 5, "");
    QuantizeOptions o4, o8;
    o4.bits = 4, o8.bits = 8;
    quantize_checkpoint(base, base + "-q4", o4);
    quantize_checkpoint(base, base + "-q8", o8);
    // the 4-bit checkpoint with one module of the 8-bit one (as mixed_4_6 bumps down_proj)
    const std::string mixed = base + "-mixed", m = "model.layers.1.mlp.down_proj";
    fs::create_directories(mixed);
    TensorStore s4 = TensorStore::open_dir(base + "-q4"), s8 = TensorStore::open_dir(base + "-q8");
    std::vector<TensorToWrite> out;
    for (const auto& [name, ref] : s4.tensors()) {
        const TensorRef& t = name.rfind(m + ".", 0) == 0 ? *s8.find(name) : ref;
        out.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
    }
    write_safetensors(mixed + "/model.safetensors", out, {{"format", "mlx"}});
    const auto with_entry = [&](const nlohmann::json& entry) {
        std::ifstream in(base + "-q4/config.json");
        nlohmann::json cfg = nlohmann::json::parse(in);
        for (const char* k : {"quantization", "quantization_config"}) cfg[k][m] = entry;
        std::ofstream(mixed + "/config.json") << cfg.dump(2);
        return load_config(mixed);
    };
    const nlohmann::json eight = {{"group_size", 64}, {"bits", 8}};
    const HParams hp = with_entry(eight);
    ASSERT_EQ(hp.quant.modules.count(m), 1u);
    TensorStore sm = TensorStore::open_dir(mixed);
    const ModelWeights w = load_weights(sm, hp);
    EXPECT_EQ(w.dec.layers[1].down.w.bits, 8);
    EXPECT_EQ(w.dec.layers[0].down.w.bits, 4);
    EXPECT_EQ(w.dec.layers[1].up.w.bits, 4);
    const ModelWeights w8 = load_weights(s8, load_config(base + "-q8"));
    EXPECT_EQ(w.dec.layers[1].down.w.to_f32(), w8.dec.layers[1].down.w.to_f32()); // the 8-bit module's own values
    // the entry must describe what is stored
    EXPECT_NE(expect_error([&] { load_weights(sm, with_entry({{"group_size", 64}, {"bits", 4}})); }).find("differs from config"),
              std::string::npos);
    EXPECT_NE(expect_error([&] { load_weights(sm, with_entry(false)); }).find("keeps it float"), std::string::npos);
    EXPECT_NE(expect_error([&] { load_weights(sm, with_entry({{"group_size", 64}, {"bits", 8}, {"mode", "mxfp4"}})); })
                  .find("mxfp4"),
              std::string::npos);
    EXPECT_NE(expect_error([&] { with_entry({{"group_size", 64}, {"bits", 99}}); }).find(m), std::string::npos); // config
    for (const auto& d : {base, base + "-q4", base + "-q8", mixed}) fs::remove_all(d);
}
