// `qasr align -m ALIGNER_DIR --text T FILE`: word timestamps of a known transcript (Qwen3-ForcedAligner).
#include "args.hpp"
#include "commands.hpp"

#include "audio/audio.hpp"
#include "qasr/qasr.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

namespace qasr::cli {
namespace {

const char* kHelp = R"(usage: qasr align -m ALIGNER_DIR (--text TEXT | --text-file F) [options] FILE

Word timestamps for a known transcript: a Qwen3-ForcedAligner checkpoint times every word of TEXT in the
audio FILE (WAV; other formats when built with FFmpeg; "-" reads raw s16le 16 kHz mono from stdin). Words are
whitespace-separated runs of letters, digits and apostrophes; each CJK character is a word; punctuation is
dropped. At most 400 s of audio (5000 classes of 80 ms). To time a transcription, use
`qasr transcribe --aligner ALIGNER_DIR`.

options:
  -m, --model DIR          the aligner's model directory
  --text TEXT              the transcript
  --text-file F            read the transcript from F ("-": standard input; not with FILE "-")
  --format F               text (default: "[00:00:01.230 --> 00:00:01.560]  word" lines), json, srt or vtt
                           (a cue per word)
  --device D               cpu (default), cuda or cuda:N
  -t, --threads N          CPU threads (default: all cores)
  --compute C              auto (default), bf16 or f32 (see qasr transcribe --help)
  --runs N                 (benchmarks) align N times in this process; the output and timings are the last
                           run's (the first pays the cold-start costs)
  -q, --quiet              no timing summary on stderr
  -v, --verbose            diagnostics on stderr
  -h, --help               this help
)";

} // namespace

int cmd_align(int argc, char** argv) {
    Args a(argc, argv, 2);
    std::string model, format = "text", text, text_file, file, v;
    bool have_text = false, quiet = false;
    int runs = 1;
    LoadOptions lo;
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a.option("-m", model) || a.option("--model", model)) {
        } else if (a.option("--text", text)) {
            have_text = true;
        } else if (a.option("--text-file", text_file)) {
        } else if (a.option("--format", format)) {
            if (format != "text" && format != "json" && format != "srt" && format != "vtt")
                throw std::invalid_argument("--format must be text, json, srt or vtt");
        } else if (load_option(a, lo)) {
        } else if (a.option("--runs", v)) {
            runs = int(to_long("--runs", v, 1, 10000));
        } else if (a.flag("-q") || a.flag("--quiet")) {
            quiet = true;
        } else if (a.flag("-v") || a.flag("--verbose")) {
            log_verbose();
        } else if (a.peek().size() > 1 && a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek() + " (see qasr align --help)");
        } else {
            if (!file.empty()) throw std::invalid_argument("qasr align takes one audio file");
            file = a.next();
        }
    }
    if (model.empty()) throw std::invalid_argument("no model directory (-m DIR)");
    if (file.empty()) throw std::invalid_argument("no audio file (see qasr align --help)");
    if (have_text == !text_file.empty()) throw std::invalid_argument("give the transcript with --text or --text-file");
    if (text_file == "-" && file == "-") throw std::invalid_argument("--text-file - and FILE - both read standard input");
    if (!text_file.empty()) {
        std::ifstream in_file;
        if (text_file != "-") {
            in_file.open(text_file, std::ios::binary);
            if (!in_file) throw std::invalid_argument("--text-file " + text_file + ": cannot open");
        }
        std::istream& in = text_file == "-" ? std::cin : in_file;
        text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    const Aligner al = Aligner::load(model, lo);
    std::vector<float> audio;
    if (file == "-") {
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
        audio = pcm_s16le_to_float(bytes.data(), bytes.size());
    } else {
        audio = load_audio_file(file);
    }
    Alignment r;
    for (int k = 0; k < runs; ++k) r = al.align(audio, text);
    if (format == "json") {
        const nlohmann::json j = {{"file", file},
                                  {"words", words_json(r.words)},
                                  {"classes", r.classes},
                                  {"n_tokens", r.n_tokens},
                                  {"audio_seconds", r.audio_seconds},
                                  {"rtf", r.rtf},
                                  {"timings_ms",
                                   {{"load", r.timings.load_ms},
                                    {"mel", r.timings.mel_ms},
                                    {"encode", r.timings.encode_ms},
                                    {"prefill", r.timings.prefill_ms}}}};
        std::cout << json_text(j) << "\n";
    } else if (format == "srt") {
        std::cout << to_srt(word_segments(r.words), 1, 0);
    } else if (format == "vtt") {
        std::cout << to_vtt(word_segments(r.words), true, 0);
    } else {
        std::cout << to_timestamped_text(word_segments(r.words));
    }
    std::cout.flush();
    if (!quiet)
        std::fprintf(stderr, "qasr: align %.2fs | %zu words | load %.0f ms | mel %.1f ms | encode %.1f ms | "
                             "aligner %.1f ms (%d tok) | RTF %.3f\n",
                     r.audio_seconds, r.words.size(), r.timings.load_ms, r.timings.mel_ms, r.timings.encode_ms,
                     r.timings.prefill_ms, r.n_tokens, r.rtf);
    return 0;
}

} // namespace qasr::cli
