// Deterministic stand-in for libFuzzer (any compiler): mutates seed inputs of each target (bit flips, byte
// changes, truncation, splices) for a fixed number of iterations and feeds them to LLVMFuzzerTestOneInput.
// A crash, a sanitizer report or a trap fails the ctest. `qasr_fuzz_driver --seeds DIR` writes the seeds as files
// instead: the corpus a libFuzzer run starts from (`qasr_fuzz DIR`); `qasr_fuzz_driver --run FILE...` runs the given
// inputs (a libFuzzer crash file, reproduced without clang).
#include "fuzz_http.hpp"
#include "fuzz_model.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

std::vector<uint8_t> bytes(uint8_t target, const std::string& s) {
    std::vector<uint8_t> v{target};
    v.insert(v.end(), s.begin(), s.end());
    return v;
}

std::vector<std::vector<uint8_t>> seeds() {
    std::vector<std::vector<uint8_t>> out;
    const std::string h = R"({"w":{"dtype":"BF16","shape":[3,5],"data_offsets":[0,30]},"b":{"dtype":"F32","shape":[1],"data_offsets":[30,34]},"__metadata__":{"format":"pt"}})";
    std::string st(8, '\0');
    for (int i = 0; i < 8; ++i) st[size_t(i)] = char((h.size() >> (8 * i)) & 0xff);
    out.push_back(bytes(0, st + h + std::string(34, '\x11')));
    std::string wav = "RIFF\x30\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x02\x00\x80\x3e\x00\x00\x00\xfa\x00\x00\x04\x00\x10\x00"
                      "data\x0c\x00\x00\x00";
    wav += std::string("\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c", 12);
    out.push_back(bytes(1, wav));
    out.push_back(bytes(2, R"({"thinker_config":{"audio_config":{"num_mel_bins":128,"d_model":64,"encoder_layers":2,)"
                           R"("encoder_attention_heads":4,"encoder_ffn_dim":128,"downsample_hidden_size":16,"output_dim":64,)"
                           R"("n_window":50,"n_window_infer":800},"text_config":{"vocab_size":151936,"hidden_size":64,)"
                           R"("intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,)"
                           R"("head_dim":32,"rms_norm_eps":1e-6,"rope_theta":1000000}}})"));
    out.push_back(bytes(2, R"({"architectures":["Qwen3ASRForTokenClassification"],"num_labels":5000,"timestamp_token_id":151705,)"
                           R"("timestamp_segment_time":80,"audio_config":{"num_mel_bins":128,"d_model":64,"encoder_layers":2,)"
                           R"("encoder_attention_heads":4,"encoder_ffn_dim":128,"downsample_hidden_size":16,"output_dim":64,)"
                           R"("n_window":50,"n_window_infer":800},"text_config":{"vocab_size":152064,"hidden_size":64,)"
                           R"("intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,)"
                           R"("head_dim":32,"rms_norm_eps":1e-6,"rope_theta":1000000}})"));
    out.push_back(bytes(7, "Hello, world! It's 2026. 今天天气很好 O'Neil's test-case ½ Ⅻ cafe\u0301 \xff\xfe"));
    out.push_back(bytes(3, "<|im_start|>system\nNames: Qwen 3, qasr.<|im_end|> 你好 👩‍💻 I'm 1234 \xff\xfe"));
    out.push_back(bytes(4, "twenty five dollars on march third twenty twenty at ten thirty 百分之五十 一百二十三"));
    out.push_back(bytes(5, R"({"added_tokens":[{"id":9,"content":"<|x|>","special":true}],"model":{"type":"BPE",)"
                           R"("vocab":{"h":0,"e":1,"l":2,"o":3,"he":4,"ll":5,"llo":6,"hello":7,"\u0120":8},)"
                           R"("merges":["h e",["l","l"],"ll o",["he","llo"]]}})"));
    out.push_back(bytes(6, wav)); // encoded audio from memory: the WAV path ...
    // ... and FFmpeg's probes: a FLAC stream header (STREAMINFO, 16 kHz mono 16-bit) and an Ogg page header
    out.push_back(bytes(6, std::string("fLaC\x80\x00\x00\x22\x10\x00\x10\x00\x00\x00\x00\x00\x00\x00\x03\xe8\x00\xf0"
                                       "\x00\x00\x3e\x80", 26) + std::string(16, '\0') + "\xff\xf8\x69\x08\x00\x00"));
    out.push_back(bytes(8, std::string("\xff\x00\x00\x10\x20\x00\x9a\x01\x00\x41\x42\x00\x43\x00\x00\x20\x01\x00\xbd\x01\x00", 21)));
    out.push_back(bytes(9, "language English<asr_text>Hello --> world <b>&amp;</b>\n\n2\n00:00:01,000 --> 00:00:02,000\r\n"
                           "日本語のテキスト、とても長い行です。 done. done. done. \xe2\x80\xa8 \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb"));
    out.push_back(bytes(6, std::string("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00"
                                       "\x00\x00\x00\x00\x01\x13OpusHead\x01\x01\x38\x01\x80\x3e\x00\x00\x00\x00\x00", 47)));
    for (auto& m : qasr_fuzz::model_dir_seeds(10)) out.push_back(std::move(m)); // whole checkpoints: slow, run rarely
    for (auto& m : qasr_fuzz::stream_seeds(11)) out.push_back(std::move(m));    // streams: slower still
    for (auto& m : qasr_fuzz::http_seeds(12)) out.push_back(std::move(m));      // requests to a live server
    return out;
}

constexpr uint8_t kModelTarget = 10, kStreamTarget = 11, kHttpTarget = 12;

} // namespace

int main(int argc, char** argv) {
    if (argc > 2 && std::string(argv[1]) == "--run") { // reproduce: run the given inputs (e.g. a libFuzzer crash file)
        for (int i = 2; i < argc; ++i) {
            std::ifstream f(argv[i], std::ios::binary);
            const std::vector<uint8_t> x((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
            if (!f.good() && !f.eof()) {
                std::fprintf(stderr, "cannot read %s\n", argv[i]);
                return 1;
            }
            LLVMFuzzerTestOneInput(x.data(), x.size());
            std::printf("%s: ran, no crash\n", argv[i]);
        }
        return 0;
    }
    if (argc > 2 && std::string(argv[1]) == "--seeds") {
        const auto base = seeds();
        for (size_t i = 0; i < base.size(); ++i)
            std::ofstream(std::string(argv[2]) + "/seed-" + std::to_string(i), std::ios::binary)
                .write(reinterpret_cast<const char*>(base[i].data()), std::streamsize(base[i].size()));
        std::printf("%zu seeds written to %s\n", base.size(), argv[2]);
        return 0;
    }
    const long iterations = argc > 1 ? std::atol(argv[1]) : 20000;
    std::mt19937_64 rng(12345);
    const auto base = seeds();
    for (const auto& s : base) LLVMFuzzerTestOneInput(s.data(), s.size());
    int models = 0;
    for (const auto& s : base) { // the unmutated seeds must run, else their target tests nothing
        if (s[0] == kModelTarget && (++models, !qasr_fuzz::model_dir(s.data() + 1, s.size() - 1))) {
            std::fprintf(stderr, "the seed checkpoint %d of the model-directory target does not load\n", int(s[1]));
            return 1;
        }
        if (s[0] == kStreamTarget && !qasr_fuzz::stream(s.data() + 1, s.size() - 1)) {
            std::fprintf(stderr, "a seed of the stream target does not run\n");
            return 1;
        }
        if (s[0] == kHttpTarget && !qasr_fuzz::http(s.data() + 1, s.size() - 1)) {
            std::fprintf(stderr, "a seed of the HTTP target does not run\n");
            return 1;
        }
    }
    long model_inputs = 0, model_runs = 0, streams = 0, requests = 0;
    if (!models) std::printf("no tokenizer (scripts/setup_tokenizer.sh): the tokenizer and model targets are off\n");
    for (long it = 0; it < iterations; ++it) {
        // a model directory is loaded and run (~10-100 ms): one round in 50 includes those seeds
        const uint8_t t = base[size_t(it) % base.size()][0];
        // (an HTTP input: a few loopback requests, some of them transcriptions — one round in 50)
        if ((t == kModelTarget && (it / long(base.size())) % 50 != 0) || (t == kStreamTarget && (it / long(base.size())) % 500 != 0) ||
            (t == kHttpTarget && (it / long(base.size())) % 50 != 0))
            continue;
        std::vector<uint8_t> x = base[size_t(it) % base.size()];
        if (x[0] == kModelTarget && rng() % 4 != 0) { // mostly structural edits (fuzz_model.cpp), else bytes
            x = qasr_fuzz::mutate_model_input(x, rng);
            ++model_inputs;
            model_runs += qasr_fuzz::model_dir(x.data() + 1, x.size() - 1);
            continue;
        }
        const int edits = 1 + int(rng() % 8);
        for (int e = 0; e < edits && x.size() > 1; ++e) {
            const size_t at = 1 + rng() % (x.size() - 1);
            switch (rng() % 5) {
            case 0: x[at] ^= uint8_t(1u << (rng() % 8)); break;
            case 1: x[at] = uint8_t(rng()); break;
            case 2: x.resize(at); break;
            case 3: x.insert(x.begin() + long(at), uint8_t(rng())); break;
            case 4: { // splice from another seed
                const auto& o = base[rng() % base.size()];
                const size_t from = 1 + rng() % (o.size() - 1), n = rng() % 16;
                for (size_t k = 0; k < n && from + k < o.size() && at + k < x.size(); ++k) x[at + k] = o[from + k];
                break;
            }
            }
        }
        if (x[0] == kModelTarget) { // counted: how many mutated checkpoints still load and run
            ++model_inputs;
            model_runs += qasr_fuzz::model_dir(x.data() + 1, x.size() - 1);
        } else if (x[0] == kStreamTarget) {
            streams += qasr_fuzz::stream(x.data() + 1, x.size() - 1);
        } else if (x[0] == kHttpTarget) {
            requests += qasr_fuzz::http(x.data() + 1, x.size() - 1);
        } else {
            LLVMFuzzerTestOneInput(x.data(), x.size());
        }
    }
    std::printf("%ld mutated inputs, no crash (model directories: %ld, of which %ld loaded and transcribed; streams "
                "run: %ld; HTTP inputs sent: %ld)\n", iterations, model_inputs, model_runs, streams, requests);
    return 0;
}
