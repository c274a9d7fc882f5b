// Fuzz targets for the parsers of untrusted bytes: safetensors headers, WAV files, config.json, tokenizer input,
// tokenizer.json files, and encoded audio from memory (the `qasr serve` upload path: WAV or FFmpeg).
// Built as libFuzzer binaries with -DQASR_FUZZ=ON (clang), and in every build as a deterministic mutation
// driver (fuzz_driver.cpp) that ctest runs.
#include "audio/audio.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "text/align_words.hpp"
#include "text/itn/itn.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const qasr::Tokenizer* tokenizer() {
    static std::unique_ptr<qasr::Tokenizer> t = [] {
        std::unique_ptr<qasr::Tokenizer> p;
        try {
            p = std::make_unique<qasr::Tokenizer>(qasr::Tokenizer::load_dir(QASR_TOKENIZER_DIR));
        } catch (const qasr::Error&) {
        }
        return p;
    }();
    return t.get();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const uint8_t which = data[0] % 8;
    ++data;
    --size;
    try {
        switch (which) {
        case 0: {
            auto t = qasr::parse_safetensors(data, size, "fuzz");
            for (auto& [n, r] : t)
                if (r.data + r.nbytes > data + size) __builtin_trap();
            break;
        }
        case 1: {
            auto a = qasr::parse_wav(data, size, "fuzz");
            if (a.samples.size() > size) __builtin_trap();
            break;
        }
        case 2: qasr::parse_config_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz"); break;
        case 3:
            if (const auto* t = tokenizer()) {
                const std::string s(reinterpret_cast<const char*>(data), size);
                const std::string back = t->decode(t->encode(s), false);
                if (qasr::utf8::sanitize(back) != back) __builtin_trap(); // decode always yields valid UTF-8
            }
            break;
        case 4: {
            const std::string s(reinterpret_cast<const char*>(data), size);
            qasr::itn::normalize(s, qasr::itn::Language::English);
            qasr::itn::normalize(s, qasr::itn::Language::Chinese);
            break;
        }
        case 5: {
            const qasr::Tokenizer t =
                qasr::Tokenizer::from_tokenizer_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
            const std::string back = t.decode(t.encode("hello <|x|> world"), false);
            if (qasr::utf8::sanitize(back) != back) __builtin_trap();
            break;
        }
        case 6: {
            const auto a = qasr::load_audio_bytes(data, size, "fuzz", 600);
            for (float v : a)
                if (!(v >= -1.0f && v <= 1.0f)) __builtin_trap(); // conditioned to [-1, 1], never NaN
            break;
        }
        case 7: { // a transcript for the aligner: its words; the bytes as raw timestamps for the repair
            const std::string s(reinterpret_cast<const char*>(data), size);
            for (const std::string& w : qasr::split_alignment_words(s))
                if (w.empty() || qasr::utf8::sanitize(w) != w || w.find_first_of(" \t\n\r") != std::string::npos)
                    __builtin_trap();
            std::vector<double> raw(size);
            for (size_t i = 0; i < size; ++i) raw[i] = double(data[i]) * 80.0;
            const std::vector<int64_t> fixed = qasr::fix_timestamps(raw);
            if (fixed.size() != raw.size()) __builtin_trap();
            for (size_t i = 1; i < fixed.size(); ++i)
                if (fixed[i] < fixed[i - 1]) __builtin_trap(); // the repair never goes back
            break;
        }
        }
    } catch (const qasr::Error&) {
    }
    return 0;
}
