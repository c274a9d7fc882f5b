// Fuzz target for model directories (hostile or broken checkpoints): the input gives config.json and the
// safetensors header of a tiny random checkpoint (bf16 in the -hf layout, bf16 in the original thinker.* layout,
// MLX 4-bit, or mlx-lm's mixed_4_6), the tensor bytes after the header stay the real ones. What loads is run on 0.6 s of audio. A load
// or a transcription may fail with qasr::Error; anything else (a crash, a sanitizer report, a trap) is a finding:
// a mis-shaped tensor that passed the checks would be read out of bounds by the kernels.
// The tokenizer is the real one cut to its byte alphabet and special tokens (same ids; loads in milliseconds).
#include "fuzz_model.hpp"

#include "core/error.hpp"
#include "model/quantize_checkpoint.hpp"
#include "model/random_checkpoint.hpp"
#include "qasr/qasr.hpp"
#include "text/utf8.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace qasr_fuzz {
namespace {

namespace fs = std::filesystem;

struct Base {
    std::string config, header;
    std::string data; // the tensor bytes after the header
};

std::string read_file(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

Base split_checkpoint(const fs::path& dir) {
    Base b;
    b.config = read_file(dir / "config.json");
    const std::string st = read_file(dir / "model.safetensors");
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(st[size_t(i)])) << (8 * i);
    b.header = st.substr(8, n);
    b.data = st.substr(8 + n);
    return b;
}

// The real tokenizer with its vocabulary cut to the 256 byte symbols and no merges (text encodes byte by byte):
// same special ids, and loading takes milliseconds instead of ~0.2 s (~1 s under the sanitizers).
std::string small_tokenizer_json() {
    nlohmann::json j = nlohmann::json::parse(read_file(fs::path(QASR_TOKENIZER_DIR) / "tokenizer.json"));
    nlohmann::json vocab = nlohmann::json::object();
    for (const auto& [k, v] : j["model"]["vocab"].items())
        if (qasr::utf8::decode(k).size() == 1) vocab[k] = v;
    j["model"]["vocab"] = vocab;
    j["model"]["merges"] = nlohmann::json::array();
    return j.dump();
}

struct Setup {
    bool ok = false;
    fs::path root, work;
    std::vector<Base> bases;
    std::vector<float> audio;
};

const Setup& setup() {
    static Setup s = [] {
        Setup x;
        if (!fs::exists(fs::path(QASR_TOKENIZER_DIR) / "tokenizer.json")) return x; // no tokenizer: target off
        const fs::path tmp = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        std::string pattern = (tmp / "qasr_fuzz_model_XXXXXX").string();
        if (!mkdtemp(pattern.data())) return x;
        x.root = pattern;
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(setup().root, ec);
        });
        qasr::write_random_checkpoint((x.root / "hf").string(), "tiny", "hf", 7, "");
        qasr::write_random_checkpoint((x.root / "original").string(), "tiny", "original", 7, "");
        qasr::QuantizeOptions q;
        q.bits = 4;
        qasr::quantize_checkpoint((x.root / "hf").string(), (x.root / "q4").string(), q);
        q.recipe = "mixed_4_6"; // per-module entries in the config's quantization block
        qasr::quantize_checkpoint((x.root / "hf").string(), (x.root / "mixed").string(), q);
        for (const char* d : {"hf", "original", "q4", "mixed"}) x.bases.push_back(split_checkpoint(x.root / d));
        x.work = x.root / "work";
        fs::create_directories(x.work);
        const std::string tok = small_tokenizer_json();
        std::ofstream(x.work / "tokenizer.json", std::ios::binary) << tok;
        // the stream target's model: loaded once, with the real tokenizer (its texts are what is compared)
        qasr::write_random_checkpoint((x.root / "stream").string(), "tiny", "hf", 7, QASR_TOKENIZER_DIR);
        for (int i = 0; i < 9600; ++i) // 0.6 s: a tone with a little deterministic noise
            x.audio.push_back(0.3f * std::sin(0.12f * float(i)) + 0.01f * float((i * 7919) % 200 - 100) / 100.0f);
        x.ok = true;
        return x;
    }();
    return s;
}

} // namespace

void prepare_models() { (void)setup(); }

std::vector<std::vector<uint8_t>> model_dir_seeds(uint8_t target) {
    std::vector<std::vector<uint8_t>> out;
    const Setup& s = setup();
    for (size_t v = 0; v < s.bases.size(); ++v) {
        std::vector<uint8_t> x{target, uint8_t(v)};
        x.insert(x.end(), s.bases[v].config.begin(), s.bases[v].config.end());
        x.push_back(0);
        x.insert(x.end(), s.bases[v].header.begin(), s.bases[v].header.end());
        out.push_back(std::move(x));
    }
    return out;
}

namespace {

// A value that breaks assumptions: off by one, doubled, halved, zero, one, negative, huge.
int64_t hostile_int(int64_t v, std::mt19937_64& rng) {
    switch (rng() % 9) {
    case 0: return v + 1;
    case 1: return v - 1;
    case 2: return v * 2;
    case 3: return v / 2;
    case 4: return 0;
    case 5: return 1;
    case 6: return -v;
    case 7: return int64_t(1) << (20 + rng() % 43);
    default: return int64_t(rng() % 300);
    }
}

size_t dtype_bytes(const std::string& d) {
    return d == "F64" || d == "I64" || d == "U64" ? 8 : d == "F32" || d == "I32" || d == "U32" ? 4
           : d == "BF16" || d == "F16" || d == "I16" ? 2 : 1;
}

// Every number of a JSON tree, as pointers into it.
void numbers(nlohmann::json& j, std::vector<nlohmann::json*>& out) {
    if (j.is_number()) out.push_back(&j);
    else if (j.is_object() || j.is_array())
        for (auto& v : j) numbers(v, out);
}

} // namespace

std::vector<uint8_t> mutate_model_input(const std::vector<uint8_t>& seed, std::mt19937_64& rng) {
    if (seed.size() < 3) return seed;
    const std::string rest(seed.begin() + 2, seed.end());
    const size_t z = rest.find('\0');
    if (z == std::string::npos) return seed;
    nlohmann::json cfg = nlohmann::json::parse(rest.substr(0, z), nullptr, false);
    nlohmann::json hdr = nlohmann::json::parse(rest.substr(z + 1), nullptr, false);
    if (cfg.is_discarded() || hdr.is_discarded() || !hdr.is_object() || hdr.size() < 2) return seed;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits; ++e) {
        auto it = hdr.begin();
        std::advance(it, long(rng() % hdr.size()));
        if (it.key() == "__metadata__") continue;
        nlohmann::json& t = it.value();
        const std::string name = it.key();
        switch (rng() % 8) {
        case 0: { // one dimension changed; the byte range follows (or not)
            auto& shape = t["shape"];
            if (shape.empty()) break;
            auto& d = shape[rng() % shape.size()];
            d = hostile_int(d.get<int64_t>(), rng);
            if (rng() % 2) {
                int64_t n = int64_t(dtype_bytes(t["dtype"].get<std::string>()));
                for (const auto& x : shape) n *= x.get<int64_t>();
                t["data_offsets"][1] = t["data_offsets"][0].get<int64_t>() + n;
            }
            break;
        }
        case 1: { // dimensions reversed or merged: the same number of elements in another shape
            auto& shape = t["shape"];
            if (shape.size() < 2) break;
            if (rng() % 2) {
                std::reverse(shape.begin(), shape.end());
            } else {
                const int64_t a = shape[0].get<int64_t>() * shape[1].get<int64_t>();
                shape.erase(shape.begin());
                shape[0] = a;
            }
            break;
        }
        case 2: { // another element type, the byte range kept or fitted
            static const char* types[] = {"BF16", "F16", "F32", "F64", "I8", "U8", "I32", "U32", "I64", "BOOL", "F8_E4M3"};
            t["dtype"] = types[rng() % (sizeof types / sizeof *types)];
            if (rng() % 2) {
                int64_t n = int64_t(dtype_bytes(t["dtype"].get<std::string>()));
                for (const auto& x : t["shape"]) n *= x.get<int64_t>();
                t["data_offsets"][1] = t["data_offsets"][0].get<int64_t>() + n;
            }
            break;
        }
        case 3: { // the byte range moved (overlapping another tensor) or resized
            const int64_t shift = hostile_int(64, rng) * (rng() % 2 ? 1 : -1);
            const int which = int(rng() % 3);
            for (int k = 0; k < 2; ++k)
                if (which == 2 || which == k) t["data_offsets"][k] = t["data_offsets"][k].get<int64_t>() + shift;
            break;
        }
        case 4: hdr.erase(name); break; // a tensor missing
        case 5: { // a tensor under another name (a second copy, or renamed)
            const std::string other = name.substr(0, name.size() - 1 - rng() % std::min<size_t>(name.size() - 1, 8)) +
                                      (rng() % 2 ? "x" : ".weight");
            hdr[other] = t;
            if (rng() % 2) hdr.erase(name);
            break;
        }
        default: { // a config value: a dimension, a count, an id, the quantization
            std::vector<nlohmann::json*> nums;
            numbers(cfg, nums);
            if (nums.empty()) break;
            nlohmann::json& v = *nums[rng() % nums.size()];
            if (v.is_number_float()) v = std::vector<double>{0.0, -1.0, 1e30, 1e-30, NAN}[rng() % 5];
            else v = hostile_int(v.get<int64_t>(), rng);
            break;
        }
        }
    }
    std::vector<uint8_t> out(seed.begin(), seed.begin() + 2);
    const std::string c = cfg.dump(), h = hdr.dump();
    out.insert(out.end(), c.begin(), c.end());
    out.push_back(0);
    out.insert(out.end(), h.begin(), h.end());
    return out;
}

bool model_dir(const uint8_t* data, size_t size) {
    const Setup& s = setup();
    if (!s.ok || size < 2) return false;
    const Base& base = s.bases[data[0] % s.bases.size()];
    const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    const size_t z = rest.find('\0');
    if (z == std::string::npos) return false;
    const std::string header = rest.substr(z + 1);
    std::ofstream(s.work / "config.json", std::ios::binary) << rest.substr(0, z);
    {
        std::ofstream f(s.work / "model.safetensors", std::ios::binary);
        char len[8];
        for (int i = 0; i < 8; ++i) len[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
        f.write(len, 8);
        f << header << base.data;
    }
    try {
        qasr::LoadOptions lo;
        lo.threads = 1;
        const qasr::Transcriber t = qasr::Transcriber::load(s.work.string(), lo);
        qasr::TranscribeOptions o;
        o.decode.max_new_tokens = 3;
        o.itn = false;
        const qasr::TranscriptionResult r = t.transcribe(s.audio, o);
        if (qasr::utf8::sanitize(r.text) != r.text || r.tokens.size() > 3) __builtin_trap();
        return true;
    } catch (const qasr::Error&) {
        return false;
    }
}

std::vector<std::vector<uint8_t>> stream_seeds(uint8_t target) {
    if (!setup().ok) return {};
    // options, audio length, then pushes: 2 s chunks over 2.5 s in pushes of 1–4000 samples with a poll and an
    // interrupt; 0.5 s chunks with pause steps over 3.4 s in many small pushes; and a stream (no draft, rollback of 12)
    // whose stable text fell back to "" when a step generated fewer ids than the rollback, before the prefix kept the
    // last step's forced ids (StreamSession::prefix_len_)
    return {{target, 0x02, 0xb8, 0x10, 0x80, 0xfe, 0x33, 0x01, 0xff, 0x40, 0x22},
            {target, 0x05, 0xff, 0x03, 0x07, 0x0b, 0x11, 0x2a, 0x05, 0xfe, 0x61, 0x09, 0x13},
            {target, 0x6a, 0xe8, 0x52, 0x1d, 0x69, 0x82, 0x3e, 0xfb, 0xb7, 0x7f, 0x8a, 0xf1}};
}

// Whether the text ends in a unit of 1–40 characters repeated: the reference's repetition fix (applied to the whole
// text by parse_asr_output) collapses a run that grows past its threshold to one unit, so a longer text need not
// start with this one's parse. (Runs that do not reach the end cannot grow.)
bool repeats_at_end(const std::string& text) {
    const std::vector<char32_t> u = qasr::utf8::decode(qasr::utf8::sanitize(text));
    for (size_t k = 1; k <= 40 && 2 * k <= u.size(); ++k)
        if (std::equal(u.end() - long(2 * k), u.end() - long(k), u.end() - long(k))) return true;
    return false;
}

[[noreturn]] void stream_fail(const char* what, const std::string& a, const std::string& b) {
    std::fprintf(stderr, "fuzz check failed in the stream target: %s\n  %s\n  %s\n", what, a.c_str(), b.c_str());
    __builtin_trap();
}

bool stream(const uint8_t* data, size_t size) {
    const Setup& s = setup();
    if (!s.ok || size < 2) return false;
    static const qasr::Transcriber t = [&] {
        qasr::LoadOptions lo;
        lo.threads = 1;
        return qasr::Transcriber::load((s.root / "stream").string(), lo);
    }();
    qasr::StreamOptions so;
    so.chunk_seconds = std::vector<double>{2.0, 1.0, 0.5, 3.0}[data[0] & 3];
    so.pause_seconds = data[0] & 4 ? 0.3 : 0.0;
    so.speculative = !(data[0] & 8);
    so.exact_final = data[0] & 16;
    so.rollback_tokens = std::vector<int>{5, 0, 2, 12}[(data[0] >> 5) & 3];
    so.unfixed_chunks = data[0] & 128 ? 0 : 2;
    so.itn = false;
    so.logprobs = data[1] & 1;
    // audio: 0.1–3.5 s of bursts (tone and noise) and pauses, from the seed bytes
    const size_t n = 1600 + size_t(data[1]) * 52800 / 255;
    std::vector<float> audio(n);
    for (size_t i = 0; i < n; ++i) {
        const bool loud = (i / 4000 + data[1]) % 3 != 2;
        const float noise = float(int((i * 2654435761u) >> 7) % 2001 - 1000) / 1000.0f;
        audio[i] = loud ? 0.25f * std::sin(0.07f * float(i) * (1.0f + float(i % 7) * 0.05f)) + 0.05f * noise : 0.002f * noise;
    }
    std::string stable; // a partial's stable text only grows
    auto check = [&](const qasr::StreamEvent& e) {
        if (qasr::utf8::sanitize(e.text()) != e.text()) stream_fail("an event's text is not valid UTF-8", e.text(), "");
        if (e.kind == qasr::StreamEvent::Kind::Partial) {
            // a pause step decodes afresh (as the final) and keeps the stable text only where it agrees
            if (so.pause_seconds == 0 && !repeats_at_end(stable) && e.stable.compare(0, stable.size(), stable) != 0)
                stream_fail("the stable text changed", stable, e.stable);
            stable = e.stable;
        }
    };
    qasr::Stream st = t.open_stream(so, check);
    size_t at = 0;
    for (size_t i = 2; i < size && at < n; ++i) {
        if (data[i] == 0xff) {
            st.interrupt();
        } else if (data[i] == 0xfe) {
            for (const auto& e : st.poll()) check(e);
        } else {
            const size_t k = std::min(n - at, size_t(data[i]) * size_t(data[i]) / 16); // 0 … 4000 samples
            st.push(audio.data() + at, k);
            at += k;
        }
    }
    if (at < n) st.push(audio.data() + at, n - at);
    const qasr::TranscriptionResult fin = st.finish();
    if (qasr::utf8::sanitize(fin.text) != fin.text) stream_fail("the final is not valid UTF-8", fin.text, "");
    // a final that decodes after the fixed prefix (speculative and exact_final off) keeps the stable text; one that
    // decodes afresh (the default) may drop it
    if (!so.speculative && !so.exact_final && !repeats_at_end(stable) && fin.text.compare(0, stable.size(), stable) != 0)
        stream_fail("the final drops stable text", stable, fin.text);
    // the final equals the offline transcript of the same audio, whatever the pushes, steps and interrupts were
    // (promised where it decodes without a text prefix: speculative or exact_final)
    if (so.speculative || so.exact_final) {
        qasr::TranscribeOptions o;
        o.itn = false;
        const qasr::TranscriptionResult off = t.transcribe(audio, o);
        if (fin.text != off.text) stream_fail("the final's text differs from the offline transcript's", fin.text, off.text);
        // one segment (≤ 3.5 s): its decode ends as offline's, and with logprobs lists offline's tokens
        if (!fin.text.empty() && fin.finish != off.finish)
            stream_fail("the final's finish reason differs from offline's", qasr::finish_reason_name(fin.finish),
                        qasr::finish_reason_name(off.finish));
        bool same = fin.tokens.size() == (so.logprobs ? off.tokens.size() : 0);
        for (size_t i = 0; same && so.logprobs && i < off.tokens.size(); ++i)
            same = fin.tokens[i].id == off.tokens[i].id && std::fabs(fin.tokens[i].logprob - off.tokens[i].logprob) < 1e-3f;
        if (!same) stream_fail("the final's tokens differ from offline's", std::to_string(fin.tokens.size()),
                               std::to_string(off.tokens.size()));
    }
    return true;
}

} // namespace qasr_fuzz
