// `qasr transcribe -m DIR FILE...`: offline transcription of files (or of stdin with "-": a file, or raw s16le 16 kHz).
#include "args.hpp"
#include "commands.hpp"

#include "api/transcriber_impl.hpp"
#include "audio/audio.hpp"
#include "pipeline/in_order.hpp"
#include "qasr/qasr.hpp"
#include "text/output.hpp"
#include "text/utf8.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <iterator>
#include <memory>

namespace qasr::cli {
namespace {

namespace fs = std::filesystem;

const char* kHelp = R"(usage: qasr transcribe -m MODEL_DIR [options] FILE...

Transcribes audio files (WAV; mp3/flac/ogg/opus/m4a/webm when built with FFmpeg). FILE "-" reads standard
input: an audio file (recognized by its header: WAV, and with FFmpeg FLAC, Ogg, MP3 with an ID3 tag, MP4, WebM),
else raw signed 16-bit little-endian mono PCM at 16 kHz.

options:
  -m, --model DIR          model directory (config.json, *.safetensors, tokenizer files)
  -l, --language L         force the language (English, en, Chinese, zh, ...); default (or auto): detect
  --context TEXT           context for the system prompt (names, terms)
  --detect-language        identify the language only (decoding stops after the model's language tag):
                           prints e.g. English (p = 0.998) per input; --format json gives language and
                           language_probability
  --format F               text (default; also txt), json (one object per file: segments, tokens, logprobs,
                           timings), srt or vtt (subtitles; segments of at most 10 s unless --segment-seconds
                           says), tsv (start and end in ms, text: per segment, cut as for subtitles, or per
                           word with --aligner), lrc (lyrics: "[mm:ss.xx]text" per segment, or per word with
                           --aligner); several at once, comma-separated, with --output-dir (one
                           transcription for all: -o out --format txt,srt,json)
  --segment-seconds S      cut the audio at pauses into pieces of at most S seconds (2..1200), each
                           transcribed on its own, for segment timestamps; text output then prints
                           "[00:00:01.230 --> 00:00:04.560]  text" lines (default 0: the audio whole)
  --offset T               start at T (seconds, or [HH:]MM:SS(.fff)); times in the output stay the file's
  --duration T             transcribe T of audio from the offset (default: to the end)
  --aligner DIR            word timestamps from a Qwen3-ForcedAligner checkpoint: each segment's text is
                           aligned to its audio; text output then prints a "[start --> end]  word" line per
                           word, json adds "words" [{"word", "start", "end"}] (srt/vtt keep segment cues);
                           pieces are then at most 180 s long
  --line-width N           subtitle lines of at most N columns (default 42; 0: a cue on one line)
  -o, --output-dir DIR     write each transcript to DIR/NAME.txt|json|srt|vtt (NAME: the input's file
                           name without its extension; "stdin" for "-") instead of standard output
  -t, --threads N          CPU threads (default: all cores)
  --batch N                transcribe up to N inputs at once, or N pieces of one (--segment-seconds, or
                           audio over 20 minutes), their decode steps batched; outputs in input order (the
                           same text; default 1)
  --device D               cpu (default), cuda or cuda:N (when built with the CUDA backend)
  --compute C              the CPU's matrix-matrix products: auto (bf16 for quantized checkpoints, float32
                           for float ones; default), bf16 (about half the encoder/prefill time on AMX or
                           AVX512-BF16 CPUs) or f32
  --max-new-tokens N       cap on generated tokens (default: ceil(seconds*20)+64)
  --ignore-eos             decode exactly --max-new-tokens argmax tokens; no EOS or repetition stop
  --temperature T          sampling temperature (default 0: greedy)
  -bs, --beam-size N       beam search over N hypotheses (1..16; default 1: greedy), as transformers'
                           generate(num_beams=N); the beams advance together (one pass over the weights)
  --length-penalty L       beam search: scores are sum(log p) / length^L (default 1)
  --top-p P                nucleus sampling threshold (default 1)
  --seed S                 sampling seed (default 0)
  --raw                    print the unparsed model output
  --live                   show the text on stderr as the model writes it (before ITN; a line per input),
                           while standard output gets the transcripts as usual
  -pc, --print-colors      text output on a terminal: color each character by the probability of its token
                           (green: sure, red: unsure); shows the model's text before ITN; with --live the
                           live text too (each piece by its least likely token)
  -pp, --print-progress    print each input's progress on stderr in steps of 5 % ("qasr: NAME: progress 35 %";
                           an estimate: TranscribeOptions::on_progress)
  --no-itn                 do not apply inverse text normalization
  --warmup                 run the warm-up pass after loading (default when several inputs are given: it
                           removes the first-call penalty from all but the warm-up itself)
  --no-warmup              skip it (default for a single input: its transcript comes sooner without it)
  -q, --quiet              no timing summary on stderr
  -v, --verbose            diagnostics on stderr (load and warm-up stage times)
  -h, --help               this help
)";

// The terminal color of probability p: from red (p < 0.2) to green (p ≥ 0.9).
const char* shade_of(float p) {
    static const std::pair<float, const char*> kShades[] = {{0.9f, "\033[38;5;40m"},  {0.75f, "\033[38;5;148m"},
                                                            {0.5f, "\033[38;5;220m"}, {0.2f, "\033[38;5;208m"}};
    for (const auto& [at_least, code] : kShades)
        if (p >= at_least) return code;
    return "\033[38;5;160m";
}

// --print-colors: the model's text (before the clean-up and ITN) with each character colored by the probability of
// the token that wrote it (a character of several tokens: the least likely; shade_of).
// A piece's language header (up to <asr_text>) is left out; pieces are joined with a space.
std::string colored_text(const Model& m, const TranscriptionResult& r) {
    std::vector<std::pair<size_t, size_t>> pieces; // [first, end) token ranges
    for (const Segment& s : r.segments) pieces.emplace_back(s.first_token, s.first_token + s.n_tokens);
    if (pieces.empty()) pieces.emplace_back(0, r.tokens.size());
    std::string out, pending;
    float p_min = 1;
    for (const auto& [b, e] : pieces) {
        size_t from = b;
        for (size_t i = b; i < e && i < r.tokens.size(); ++i)
            if (r.tokens[i].id == m.special.asr_text) from = i + 1;
        if (!out.empty()) out += ' ';
        for (size_t i = from; i < e && i < r.tokens.size(); ++i) {
            pending += m.tokenizer.decode_bytes({r.tokens[i].id});
            p_min = std::min(p_min, std::exp(r.tokens[i].logprob));
            if (pending.empty() || utf8::incomplete_tail(pending)) continue;
            out += shade_of(p_min) + utf8::sanitize(pending) + "\033[0m";
            pending.clear();
            p_min = 1;
        }
        out += utf8::sanitize(pending);
        pending.clear();
    }
    return out + "\n";
}

// OpenAI whisper's tsv: a header, then start and end in whole milliseconds and the text (tabs and line breaks
// in it as spaces)
std::string to_tsv(const std::vector<Segment>& segs) {
    std::string out = "start\tend\ttext\n";
    for (const Segment& s : segs) {
        std::string t = s.text;
        for (char& c : t)
            if (c == '\t' || c == '\n' || c == '\r') c = ' ';
        out += std::to_string(std::llround(s.start * 1000)) + "\t" + std::to_string(std::llround(s.end * 1000)) + "\t" + t + "\n";
    }
    return out;
}

// LRC lyrics (songs: Qwen3-ASR transcribes singing): "[mm:ss.xx]text" per segment (or word), minutes past 59 as
// they come; line breaks in the text as spaces
std::string to_lrc(const std::vector<Segment>& segs) {
    std::string out = "[re:qasr]\n";
    for (const Segment& s : segs) {
        const long long cs = std::llround(std::max(0.0, s.start) * 100);
        char t[40];
        std::snprintf(t, sizeof t, "[%02lld:%02lld.%02lld]", cs / 6000, cs / 100 % 60, cs % 100);
        std::string text = s.text;
        for (char& c : text)
            if (c == '\n' || c == '\r') c = ' ';
        out += t + text + "\n";
    }
    return out;
}

// --format: a comma-separated list of text|txt, json, srt, vtt, tsv, lrc (each once, in the order given)
std::vector<std::string> parse_formats(const std::string& list) {
    std::vector<std::string> out;
    size_t at = 0;
    for (;;) {
        const size_t comma = list.find(',', at);
        std::string f = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
        if (f == "txt") f = "text";
        if (f != "text" && f != "json" && f != "srt" && f != "vtt" && f != "tsv" && f != "lrc")
            throw std::invalid_argument("--format takes text (txt), json, srt, vtt, tsv or lrc, comma-separated; got '" +
                                        list + "'");
        if (std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
        if (comma == std::string::npos) return out;
        at = comma + 1;
    }
}

std::string render(const std::string& file, const TranscriptionResult& r, const Tokenizer& tok, const std::string& format,
                   bool raw, bool timestamps, int line_width, bool language_only, bool words) {
    if (format == "json") return json_text(result_json(file, r, tok)) + "\n";
    if (language_only) {
        char p[32];
        std::snprintf(p, sizeof p, "%.3f", r.language_probability);
        return (r.language.empty() ? std::string("none") : r.language) + " (p = " + p + ")\n";
    }
    if (format == "tsv") return to_tsv(words ? word_segments(r.words) : r.segments);
    if (format == "lrc") return to_lrc(words ? word_segments(r.words) : r.segments);
    if (format == "srt") return to_srt(r.segments, 1, line_width);
    if (format == "vtt") return to_vtt(r.segments, true, line_width);
    if (raw) return r.raw_text + "\n";
    if (words) return to_timestamped_text(word_segments(r.words));
    return timestamps ? to_timestamped_text(r.segments) : r.text + "\n";
}

// DIR/NAME.EXT for an input: its file name without the extension ("stdin" for "-"), NAME-2.EXT, NAME-3.EXT, ...
// for later inputs of the same name
std::string output_path(const std::string& dir, const std::string& input, const std::string& format,
                        std::set<std::string>& taken) {
    std::string name = input == "-" ? "stdin" : fs::path(input).stem().string();
    if (name.empty()) name = "transcript";
    const std::string ext = "." + (format == "text" ? std::string("txt") : format);
    std::string path = (fs::path(dir) / (name + ext)).string();
    for (int k = 2; taken.count(path); ++k) path = (fs::path(dir) / (name + "-" + std::to_string(k) + ext)).string();
    taken.insert(path);
    return path;
}

} // namespace

nlohmann::json result_json(const std::string& file, const TranscriptionResult& r, const Tokenizer& tok) {
    nlohmann::json toks = nlohmann::json::array(), segs = nlohmann::json::array();
    for (const auto& t : r.tokens) toks.push_back({{"id", t.id}, {"text", tok.decode_bytes({t.id}, false)}, {"logprob", t.logprob}});
    for (const auto& s : r.segments)
        segs.push_back({{"start", s.start}, {"end", s.end}, {"text", s.text}, {"language", s.language},
                        {"first_token", s.first_token}, {"n_tokens", s.n_tokens}});
    return {{"file", file},
            {"text", r.text},
            {"language", r.language},
            {"language_probability", r.language_probability},
            {"raw_text", r.raw_text},
            {"finish_reason", finish_reason_name(r.finish)},
            {"segments", segs},
            {"words", words_json(r.words)},
            {"tokens", toks},
            {"n_prompt_tokens", r.n_prompt_tokens},
            {"n_audio_tokens", r.n_audio_tokens},
            {"audio_seconds", r.audio_seconds},
            {"rtf", r.rtf},
            {"timings_ms",
             {{"load", r.timings.load_ms}, {"mel", r.timings.mel_ms}, {"encode", r.timings.encode_ms},
              {"prefill", r.timings.prefill_ms}, {"decode", r.timings.decode_ms}}}};
}

int cmd_transcribe(int argc, char** argv) {
    Args a(argc, argv, 2);
    std::string model, out_dir, aligner_dir, v;
    std::vector<std::string> formats = {"text"};
    double segment_seconds = -1; // -1: 10 for subtitles, else 0
    int line_width = 42;
    std::vector<std::string> files;
    TranscribeOptions o;
    LoadOptions lo;
    bool raw = false, quiet = false, live_text = false, print_progress = false, print_colors = false;
    int warm = -1; // -1: warm up when there are several inputs
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a.option("-m", model) || a.option("--model", model)) {
        } else if (a.option("--language", o.language) || a.option("-l", o.language)) {
        } else if (a.option("--context", o.context)) {
        } else if (a.option("--format", v)) {
            formats = parse_formats(v);
        } else if (a.option("--segment-seconds", v)) {
            segment_seconds = to_double("--segment-seconds", v, 0.0, 1200.0);
            if (segment_seconds != 0 && segment_seconds < 2)
                throw std::invalid_argument("--segment-seconds must be 0 (off) or between 2 and 1200");
        } else if (a.option("--offset", v)) {
            o.offset_seconds = to_time("--offset", v);
        } else if (a.option("--duration", v)) {
            o.duration_seconds = to_time("--duration", v);
            if (o.duration_seconds <= 0) throw std::invalid_argument("--duration must be more than 0");
        } else if (a.option("--aligner", aligner_dir)) {
        } else if (a.option("--line-width", v)) {
            line_width = int(to_long("--line-width", v, 0, 10000));
        } else if (a.option("-o", out_dir) || a.option("--output-dir", out_dir)) {
        } else if (a.option("--batch", v)) {
            lo.max_batch = int(to_long("--batch", v, 1, 128));
        } else if (load_option(a, lo)) {
        } else if (a.option("--max-new-tokens", v)) {
            o.decode.max_new_tokens = int(to_long("--max-new-tokens", v, 1, 1000000));
        } else if (a.flag("--ignore-eos")) {
            o.decode.ignore_eos = true;
        } else if (a.option("--temperature", v)) {
            o.decode.temperature = float(to_double("--temperature", v, 0.0, 100.0));
        } else if (a.option("--beam-size", v) || a.option("-bs", v)) {
            o.decode.beam_size = int(to_long("--beam-size", v, 1, 16));
        } else if (a.option("--length-penalty", v)) {
            o.decode.length_penalty = float(to_double("--length-penalty", v, -10.0, 10.0));
        } else if (a.option("--top-p", v)) {
            o.decode.top_p = float(to_double("--top-p", v, 1e-6, 1.0));
        } else if (a.option("--seed", v)) {
            o.decode.seed = uint64_t(to_long("--seed", v, 0, 0x7fffffffffffffffL));
        } else if (a.flag("--detect-language")) {
            o.language_only = true;
        } else if (a.flag("--live")) {
            live_text = true;
        } else if (a.flag("-pc") || a.flag("--print-colors")) {
            print_colors = true;
        } else if (a.flag("-pp") || a.flag("--print-progress")) {
            print_progress = true;
        } else if (a.flag("--raw")) {
            raw = true;
        } else if (a.flag("--no-itn")) {
            o.itn = false;
        } else if (a.flag("--warmup")) {
            warm = 1;
        } else if (a.flag("--no-warmup")) {
            warm = 0;
        } else if (a.flag("-q") || a.flag("--quiet")) {
            quiet = true;
        } else if (a.flag("-v") || a.flag("--verbose")) {
            log_verbose();
        } else if (a.peek().size() > 1 && a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek() + " (see qasr transcribe --help)");
        } else {
            files.push_back(a.next());
        }
    }
    if (model.empty()) throw std::invalid_argument("no model directory (-m DIR)");
    if (files.empty()) throw std::invalid_argument("no input files (see qasr transcribe --help)");
    if (o.decode.ignore_eos && o.decode.max_new_tokens <= 0)
        throw std::invalid_argument("--ignore-eos needs --max-new-tokens N");
    if (!o.language.empty()) o.language = canonical_language(o.language);
    const auto has = [&](const char* f) { return std::find(formats.begin(), formats.end(), f) != formats.end(); };
    const bool subtitles = has("srt") || has("vtt");
    const std::string& format = formats.front(); // on standard output: the only one
    if (formats.size() > 1 && out_dir.empty())
        throw std::invalid_argument("several formats need --output-dir DIR (a file of each per input)");
    const bool timed = subtitles || has("tsv") || has("lrc"); // formats of timed lines
    if (o.language_only && (timed || !o.language.empty() || segment_seconds > 0))
        throw std::invalid_argument("--detect-language cannot be combined with --language, --segment-seconds or "
                                    "--format srt|vtt|tsv|lrc");
    if (!aligner_dir.empty() && o.language_only)
        throw std::invalid_argument("--aligner times the words of a transcript; --detect-language writes none");
    if (!aligner_dir.empty()) o.max_piece_seconds = Aligner::max_piece_seconds;
    o.segment_seconds = segment_seconds >= 0 ? segment_seconds : timed ? 10.0 : 0.0;
    if (subtitles && files.size() > 1 && out_dir.empty())
        throw std::invalid_argument("several inputs with --format " + format + " need --output-dir DIR (one file each)");
    if (print_colors && (format != "text" || formats.size() > 1 || !out_dir.empty() || raw || segment_seconds > 0 ||
                         !aligner_dir.empty() || o.language_only))
        throw std::invalid_argument("--print-colors colors the text on standard output: not with --format other than "
                                    "text, --output-dir, --raw, --segment-seconds, --aligner or --detect-language");
    if (!out_dir.empty() && !fs::is_directory(out_dir))
        throw std::invalid_argument("--output-dir " + out_dir + ": not a directory");
    std::set<std::string> written;
    // One input: the warm-up pass would pay the first-call costs (kernel loading, cuBLAS shapes, graph capture, page
    // faults) for a request that is not made, before paying them again in part for the real one.
    const bool do_warm = warm < 0 ? files.size() > 1 : warm == 1;
    Transcriber t = do_warm ? Transcriber::load_with_warmup(model, lo) : Transcriber::load(model, lo);
    std::unique_ptr<Aligner> aligner;
    if (!aligner_dir.empty()) {
        LoadOptions al = lo;
        al.max_batch = 1;
        aligner = std::make_unique<Aligner>(Aligner::load(aligner_dir, al));
    }
    // Several inputs with --batch N: N files at once, their decode steps batched, the outputs in input order.
    const int parallel = files.size() > 1 ? lo.max_batch : 1;
    // Subtitles and timestamped lines on standard output: each segment as soon as its piece is transcribed (one
    // file at a time)
    const bool live = out_dir.empty() && formats.size() == 1 && !raw && parallel == 1 &&
                      (subtitles || (format == "text" && o.segment_seconds > 0 && !aligner));
    int cues = 0;
    if (live) {
        o.on_segment = [&](const Segment& s) {
            std::cout << (format == "srt"   ? (cues ? "\n" : "") + to_srt({s}, cues + 1, line_width)
                          : format == "vtt" ? to_vtt({s}, false, line_width)
                                            : to_timestamped_text({s}))
                      << std::flush;
            ++cues;
        };
    }
    // --live: the text as it is written, on stderr (one input at a time, so the lines do not interleave)
    bool shown = false;
    if (live_text) {
        if (parallel > 1) throw std::invalid_argument("--live shows one transcription at a time: not with --batch and several inputs");
        if (o.language_only) throw std::invalid_argument("--live shows the text; --detect-language writes none");
        if (print_colors) // with -pc each delta in the color of its least likely token
            o.on_text_tokens = [&shown](const std::string& d, const std::vector<TokenInfo>& tokens) {
                float p = 1;
                for (const TokenInfo& x : tokens) p = std::min(p, std::exp(x.logprob));
                std::cerr << shade_of(p) << d << "\033[0m" << std::flush;
                shown = true;
            };
        else
            o.on_text = [&shown](const std::string& d) {
                std::cerr << d << std::flush;
                shown = true;
            };
    }
    if (print_progress && live_text)
        throw std::invalid_argument("--print-progress and --live both write to stderr as the model runs: choose one");
    size_t done = 0;
    double audio_seconds = 0.0;
    const auto t0 = std::chrono::steady_clock::now();
    run_in_order<TranscriptionResult>(
        files.size(), parallel,
        [&](size_t i) {
            if (live) {
                cues = 0;
                if (format == "vtt") std::cout << "WEBVTT\n" << std::flush;
            }
            TranscribeOptions oi = o;
            if (print_progress) // one line per 5 % step reached; several inputs at once (--batch) print side by side
                oi.on_progress = [name = files[i] == "-" ? std::string("stdin") : files[i], shown = -1](float f) mutable {
                    const int pct = int(f * 100.0f + 1e-4f) / 5 * 5;
                    if (pct <= shown) return;
                    shown = pct;
                    std::fprintf(stderr, "qasr: %s: progress %d %%\n", name.c_str(), pct);
                };
            if (files[i] != "-" && !aligner) return t.transcribe_file(files[i], oi);
            std::vector<float> samples;
            if (files[i] != "-") {
                samples = load_audio_file(files[i]);
            } else {
                std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
                samples = looks_like_audio_file(bytes.data(), bytes.size())
                              ? load_audio_bytes(bytes.data(), bytes.size(), "standard input")
                              : pcm_s16le_to_float(bytes.data(), bytes.size());
            }
            TranscriptionResult r = t.transcribe(samples, oi);
            if (aligner) aligner->add_words(samples, r);
            return r;
        },
        [&](TranscriptionResult& r) {
            if (shown) std::cerr << "\n";
            shown = false;
            const std::string& f = files[done++];
            // timestamped text lines when --segment-seconds was given (not for the pieces of subtitles)
            const auto text = [&](const std::string& fmt) {
                return render(f, r, t.impl().model->tokenizer, fmt, raw, segment_seconds > 0, line_width, o.language_only,
                              aligner != nullptr);
            };
            if (!live && out_dir.empty()) {
                std::cout << (print_colors ? colored_text(*t.impl().model, r) : text(format));
                std::cout.flush();
            } else if (!live) {
                for (const std::string& fmt : formats) {
                    const std::string path = output_path(out_dir, f, fmt, written);
                    std::ofstream out(path, std::ios::binary);
                    out << text(fmt);
                    out.close();
                    if (!out) throw std::runtime_error("cannot write " + path);
                    if (!quiet) std::cerr << "wrote " << path << "\n";
                }
            }
            audio_seconds += r.audio_seconds;
            if (!quiet) std::cerr << summary_line(r) << "\n";
        });
    // Several inputs: the whole run's time (requests overlap with --batch, so their own RTFs do not add up)
    if (!quiet && files.size() > 1) {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::fprintf(stderr, "qasr: %zu inputs, %.2f s of audio in %.3f s (RTF %.4f, %.0fx real time, batch %d)\n",
                     files.size(), audio_seconds, s, audio_seconds > 0 ? s / audio_seconds : 0.0,
                     s > 0 ? audio_seconds / s : 0.0, parallel);
    }
    return 0;
}

} // namespace qasr::cli
