// Fuzz targets for the parsers of untrusted bytes: safetensors headers, WAV files, config.json, tokenizer input,
// tokenizer.json files, encoded audio from memory (the `qasr serve` upload path: WAV or FFmpeg), transcripts for
// the aligner, generated token ids (the streamed text), model output text (parsing, subtitles, terminal lines) and
// whole model directories and live streams (fuzz_model.cpp), and raw HTTP requests to `qasr serve` (fuzz_http.cpp).
// Built as libFuzzer binaries with -DQASR_FUZZ=ON (clang), and in every build as a deterministic mutation
// driver (fuzz_driver.cpp) that ctest runs.
#include "fuzz_http.hpp"
#include "fuzz_model.hpp"

#include "audio/audio.hpp"
#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "text/align_words.hpp"
#include "text/itn/itn.hpp"
#include "text/output.hpp"
#include "text/text_deltas.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

#include "qasr/qasr.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

const uint8_t* g_input = nullptr; // the input being run, printed when a check fails
size_t g_size = 0;

// A broken invariant: which check, and the input (target byte first) as a C string literal, then a trap.
[[noreturn]] void fuzz_fail(int line) {
    std::fprintf(stderr, "fuzz check failed at fuzz_targets.cpp:%d, input of %zu bytes:\n\"", line, g_size);
    for (size_t i = 0; i < g_size; ++i) std::fprintf(stderr, "\\x%02x", g_input[i]);
    std::fprintf(stderr, "\"\n");
    __builtin_trap();
}

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

bool valid(const std::string& s) { return qasr::utf8::sanitize(s) == s; }

int columns(const std::string& valid_utf8) {
    int n = 0;
    for (char32_t c : qasr::utf8::decode(valid_utf8)) n += qasr::utf8::display_width(c);
    return n;
}

size_t count(const std::string& s, const std::string& what) {
    size_t n = 0;
    for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
    return n;
}

// Generated ids, 3 bytes each (0xff first: the <asr_text> tag), through the incremental detokenizer and TextDeltas:
// the stream gives the whole decode, the deltas are valid UTF-8 and concatenate to the parser's text.
void token_stream(const qasr::Tokenizer& t, const uint8_t* data, size_t size) {
    const int tag = *t.token_id("<asr_text>");
    std::vector<int> ids;
    for (size_t i = 0; i + 2 < size; i += 3)
        ids.push_back(data[i] == 0xff ? tag : int((data[i] | data[i + 1] << 8 | data[i + 2] << 16) % t.vocab_size()));
    qasr::TokenTextStream ts(t);
    std::string streamed;
    for (int id : ids) streamed += ts.push(id);
    streamed += ts.flush();
    const std::string raw = t.decode(ids);
    if (streamed != raw) fuzz_fail(__LINE__);
    const bool repeated = qasr::fix_repetitions(qasr::strip_space(raw)) != qasr::strip_space(raw);
    for (const bool forced : {false, true}) {
        std::string all;
        size_t given = 0; // the deltas' tokens, never more than were pushed (none for an incomplete character's end)
        qasr::TextDeltas td(t, tag, forced, [&](const std::string& d, const std::vector<qasr::TokenInfo>& tokens) {
            if (d.empty() || !valid(d)) fuzz_fail(__LINE__);
            all += d;
            given += tokens.size();
        });
        for (int id : ids) td.push(id);
        td.finish(raw);
        if (given > ids.size()) fuzz_fail(__LINE__);
        // the deltas are the text before the repetition fix (TranscribeOptions::on_text)
        if (!repeated && all != qasr::parse_asr_output(raw, forced ? "English" : "").text) fuzz_fail(__LINE__);
    }
}

// Model output text: parsing, the language name, subtitles and a terminal line's tail.
void output_text(const std::string& bytes) {
    const auto p = qasr::parse_asr_output(bytes, "");
    if (!valid(p.text) || !valid(p.language)) fuzz_fail(__LINE__);
    const std::string s = qasr::utf8::sanitize(bytes);
    if (qasr::fix_repetitions(s).size() > s.size()) fuzz_fail(__LINE__);
    try {
        const std::string l = qasr::canonical_language(s);
        const auto& all = qasr::supported_languages();
        if (!l.empty() && std::find(all.begin(), all.end(), l) == all.end()) fuzz_fail(__LINE__);
    } catch (const qasr::Error&) {
    }
    const std::vector<qasr::Segment> segs{{0.5, 2.25, s, "English", 0, 0}, {3.0, 4.5, s, "English", 0, 0}};
    for (const int width : {0, 1, 7, 42}) {
        // the text cannot end a cue early (a blank line) or make a timing line of its own
        const std::string srt = qasr::to_srt(segs, 1, width), vtt = qasr::to_vtt(segs, true, width);
        if (count(srt, "-->") != 2 || count(vtt, "-->") != 2) fuzz_fail(__LINE__);
        if (!qasr::strip_space(s).empty() && (count(srt, "\n\n") != 1 || count(vtt, "\n\n") != 2)) fuzz_fail(__LINE__);
        if (count(vtt, "<") != 0 || count(vtt, ">") != 2) fuzz_fail(__LINE__); // markup escaped: only the arrows
        if (!valid(srt) || !valid(vtt)) fuzz_fail(__LINE__);
    }
    if (count(qasr::to_timestamped_text(segs), "\n") != 2) fuzz_fail(__LINE__); // one line per segment
    for (const int cols : {0, 1, 5, 30}) {
        const size_t at = qasr::utf8::fitting_tail(s, cols);
        if (at > s.size() || (at < s.size() && (uint8_t(s[at]) & 0xc0) == 0x80)) fuzz_fail(__LINE__);
        if (columns(s.substr(at)) > cols) fuzz_fail(__LINE__);
    }
}

// QASR_FUZZ_TARGET=N: every input goes to target N (a campaign on one target; its first byte is still skipped); -1
// when unset.
int only_target() {
    static const int only = std::getenv("QASR_FUZZ_TARGET") ? std::atoi(std::getenv("QASR_FUZZ_TARGET")) % 13 : -1;
    return only;
}

} // namespace

// libFuzzer: before the first input, the set-up of the targets that need one (tiny checkpoints, the HTTP server), so
// that -timeout measures inputs only. (The driver, qasr_fuzz_driver, does not call it: its set-up runs on first use.)
extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const int only = only_target();
    if (only < 0 || only == 10 || only == 11) qasr_fuzz::prepare_models();
    if (only < 0 || only == 12) qasr_fuzz::prepare_http();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    g_input = data, g_size = size;
    const int only = only_target();
    const uint8_t which = only >= 0 ? uint8_t(only) : data[0] % 13;
    ++data;
    --size;
    try {
        switch (which) {
        case 0: {
            auto t = qasr::parse_safetensors(data, size, "fuzz");
            for (auto& [n, r] : t)
                if (r.data + r.nbytes > data + size) fuzz_fail(__LINE__);
            break;
        }
        case 1: {
            auto a = qasr::parse_wav(data, size, "fuzz");
            if (a.samples.size() > size) fuzz_fail(__LINE__);
            break;
        }
        case 2: qasr::parse_config_json(std::string(reinterpret_cast<const char*>(data), size), "fuzz"); break;
        case 3:
            if (const auto* t = tokenizer()) {
                const std::string s(reinterpret_cast<const char*>(data), size);
                const std::string back = t->decode(t->encode(s), false);
                if (qasr::utf8::sanitize(back) != back) fuzz_fail(__LINE__); // decode always yields valid UTF-8
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
            if (qasr::utf8::sanitize(back) != back) fuzz_fail(__LINE__);
            break;
        }
        case 6: {
            const auto a = qasr::load_audio_bytes(data, size, "fuzz", 600);
            for (float v : a)
                if (!(v >= -1.0f && v <= 1.0f)) fuzz_fail(__LINE__); // conditioned to [-1, 1], never NaN
            break;
        }
        case 7: { // a transcript for the aligner: its words; the bytes as raw timestamps for the repair
            const std::string s(reinterpret_cast<const char*>(data), size);
            for (const std::string& w : qasr::split_alignment_words(s))
                if (w.empty() || qasr::utf8::sanitize(w) != w || w.find_first_of(" \t\n\r") != std::string::npos)
                    fuzz_fail(__LINE__);
            std::vector<double> raw(size);
            for (size_t i = 0; i < size; ++i) raw[i] = double(data[i]) * 80.0;
            const std::vector<int64_t> fixed = qasr::fix_timestamps(raw);
            if (fixed.size() != raw.size()) fuzz_fail(__LINE__);
            for (size_t i = 1; i < fixed.size(); ++i)
                if (fixed[i] < fixed[i - 1]) fuzz_fail(__LINE__); // the repair never goes back
            break;
        }
        case 8:
            if (const auto* t = tokenizer()) token_stream(*t, data, size);
            break;
        case 9: output_text(std::string(reinterpret_cast<const char*>(data), size)); break;
        case 10: qasr_fuzz::model_dir(data, size); break;
        case 11: qasr_fuzz::stream(data, size); break;
        case 12: qasr_fuzz::http(data, size); break;
        }
    } catch (const qasr::Error&) {
    }
    return 0;
}
