// `qasr stream -m DIR`: live transcription of raw s16le 16 kHz from stdin (or `--file X [--realtime]`, or the
// microphone with `--capture`: stream_capture.cpp), partials printed in place and finals on their own lines
// (`--json`: one event per line).
// `qasr stream --bench -m DIR FILE...` (also `qasr bench --stream`): finalization latency (last sample pushed →
// final text), per-chunk compute over the stream, and the streamed final against the offline transcript.
#include "args.hpp"
#include "commands.hpp"
#include "stream_capture.hpp"

#include "api/transcriber_impl.hpp"
#include "audio/audio.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"
#include "pipeline/session.hpp"
#include "pipeline/stream.hpp"
#include "text/output.hpp"
#include "text/utf8.hpp"

#include <nlohmann/json.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

namespace qasr::cli {
namespace {

const char* kHelp = R"(usage: qasr stream -m MODEL_DIR [options]
       qasr stream --bench -m MODEL_DIR [options] FILE...

Live transcription. Reads raw signed 16-bit little-endian mono PCM at 16 kHz from standard input (e.g.
`arecord -f S16_LE -r 16000 -c 1 | qasr stream -m DIR`), replays --file, or listens to a microphone (--capture).
Partial text is printed in place (on a terminal), final text on its own line.

options:
  -m, --model DIR          model directory
  --file F                 replay an audio file instead of reading stdin
  --capture                transcribe the default microphone (SDL2 builds); Enter ends the utterance (the key
                           release: the final follows at once), as does Ctrl-C
  --capture-device NAME    a capture device by name (implies --capture; see --list-devices)
  --list-devices           list the capture devices and exit
  --ptt                    with --capture: push to talk, a loop of utterances: Enter starts talking, Enter
                           again stops and prints the final; Ctrl-C or the end of stdin quits
  --auto-finish S          with --capture, hands-free: an utterance ends after S seconds of quiet following
                           speech (its final is printed) and the next begins; Enter or Ctrl-C quits
  --capture-seconds S      with --capture: end an utterance after S seconds of audio
  --save-audio F           write the audio transcribed to F (16-bit WAV; with --ptt or --auto-finish F-1.wav,
                           F-2.wav, ... per utterance)
  --realtime               with --file: push audio at real speed (100 ms blocks); with --bench: each 100 ms
                           block is pushed when it would have been captured, and the finalization latency runs
                           from the end of the audio (the key release) to the final text, so it includes what
                           is left of a step still running at the release. The release interrupts that step
                           (Stream::interrupt) at its next stage boundary; so does the end of stdin
  --no-interrupt           the release does not interrupt a running step (finish() waits for it)
  --json                   print events as JSON lines {"type":"partial|final","stable","unstable","language","t"}
  --logprobs               the final result's tokens with log-probabilities, its finish reason and the language
                           tag's probability (StreamOptions::logprobs); with --json a closing line per utterance
                           {"type":"result", ...} holds them as `qasr transcribe --format json` prints a result
  -l, --language L         force the language (default or auto: detect)
  --context TEXT           system-prompt context
  --chunk-seconds S        decoding cadence (default 2)
  --rollback N             tokens re-decoded each chunk (default 5)
  --unfixed-chunks N       chunks decoded without a text prefix (default 2)
  --segment-windows N      segment bound in 8-second windows (default 3)
  -t, --threads N          CPU threads
  --device D               cpu (default), cuda or cuda:N: encoder layers and decoder on a GPU (the log-mel and
                           the conv stem stay on the CPU; when built with the CUDA backend)
  --compute C              the CPU's matrix-matrix products: auto (default), bf16 or f32 (see qasr transcribe)
  --no-itn                 no inverse text normalization of finals
  --exact-final            decode the final token by token without the rolled-back prefix or a draft: the
                           offline pipeline bit for bit, at the cost of a full decode when the key is released
  --no-speculative         do not verify the previous hypothesis as a draft in the prefill pass (each step then
                           decodes every new token sequentially; the final keeps the rolled-back prefix)
  --pause-seconds S        a quiet stretch of S seconds after speech triggers a step that decodes all audio so
                           far like the final, so that a key release after it finds a complete draft (e.g. 0.3;
                           default 0: off — on a slow machine the step often still runs at the release)
  --endpoint-final         approximate: if only quiet audio followed the last pause step, finish() returns its
                           transcript at once (the quiet tail is not decoded)
  --bench                  benchmark mode (see below)
  --tokens-per-second R    (benchmarks) emulate a transcript of ⌈R·seconds⌉+4 tokens
  -h, --help               this help

--bench: for each FILE, pushes the audio in 100 ms blocks as fast as possible (each chunk step runs inside the
push that completes its chunk, as it would live), then measures finish(); also transcribes the file offline and
reports the token edit distance between the streamed final and the offline transcript. With random-weight
checkpoints (no natural end of transcript) use --tokens-per-second R: every hypothesis, streamed and offline,
is cut at ⌈R·seconds⌉+4 tokens, the length a real model's transcript would have (R ≈ 3.5 for English speech). Prints one line per file
and a JSON summary (median and worst finalization latency, per-chunk compute).
)";

struct Common {
    std::string model;
    StreamOptions so;
    LoadOptions lo;
};

bool parse_common(Args& a, Common& c) {
    std::string v;
    if (a.option("-m", c.model) || a.option("--model", c.model)) return true;
    if (a.option("--language", c.so.language) || a.option("-l", c.so.language) || a.option("--context", c.so.context)) return true;
    if (a.option("--chunk-seconds", v)) return c.so.chunk_seconds = to_double("--chunk-seconds", v, 0.1, 60), true;
    if (a.option("--rollback", v)) return c.so.rollback_tokens = int(to_long("--rollback", v, 0, 1000)), true;
    if (a.option("--unfixed-chunks", v)) return c.so.unfixed_chunks = int(to_long("--unfixed-chunks", v, 0, 1000)), true;
    if (a.option("--segment-windows", v))
        return c.so.max_segment_windows = int(to_long("--segment-windows", v, 1, 1000)), true;
    if (load_option(a, c.lo)) return true;
    if (a.flag("--no-itn")) return c.so.itn = false, true;
    if (a.flag("--exact-final")) return c.so.exact_final = true, true;
    if (a.flag("--no-speculative")) return c.so.speculative = false, true;
    if (a.flag("--endpoint-final")) return c.so.endpoint_final = true, true;
    if (a.flag("--logprobs")) return c.so.logprobs = true, true;
    if (a.option("--pause-seconds", v)) {
        c.so.pause_seconds = to_double("--pause-seconds", v, 0, 60);
        return true;
    }
    if (a.option("--tokens-per-second", v))
        return c.so.emulate_tokens_per_second = to_double("--tokens-per-second", v, 0.1, 100), true;
    return false;
}

int edit_distance(const std::vector<int>& a, const std::vector<int>& b) {
    std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = int(j);
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = int(i);
        for (size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// When enabled, calls s.interrupt() at `when` (the key release of a replayed recording) from its own thread,
// unless it is destroyed first: the release can fall while push() is inside a step.
class ReleaseAt {
public:
    ReleaseAt(StreamSession& s, std::chrono::steady_clock::time_point when, bool enabled) {
        if (!enabled) return;
        th_ = std::thread([this, &s, when] {
            std::unique_lock<std::mutex> lk(m_);
            if (!cv_.wait_until(lk, when, [this] { return done_; })) s.interrupt();
        });
    }
    ~ReleaseAt() {
        if (!th_.joinable()) return;
        {
            std::lock_guard<std::mutex> lk(m_);
            done_ = true;
        }
        cv_.notify_all();
        th_.join();
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread th_;
};

int run_bench(const Common& c, const std::vector<std::string>& files, bool realtime, bool interrupt) {
    Transcriber t = Transcriber::load_with_warmup(c.model, c.lo);
    const auto& model = t.impl().model;
    std::vector<double> fin_ms, chunk_ms;
    std::vector<double> f_mel, f_enc, f_pre, f_dec, f_other, c_mel, c_enc, c_pre, c_dec; // finalization / chunk breakdown
    long drafted = 0, accepted = 0, pause_steps = 0, endpoint_finals = 0, stable_revised = 0, interrupted = 0;
    nlohmann::json per_file = nlohmann::json::array();
    double load0[1] = {0};
    ::getloadavg(load0, 1);
    for (const auto& f : files) {
        const std::vector<float> audio = load_audio_file(f);
        StreamSession s(model, c.so);
        const size_t block = 1600;
        std::string stable; // the last partial's stable text: does the final keep it?
        const auto t0 = std::chrono::steady_clock::now();
        auto captured = [&](size_t end_sample) { return t0 + std::chrono::microseconds(end_sample * 1000 / 16); };
        TranscriptionResult fin;
        std::chrono::steady_clock::time_point release;
        {
            ReleaseAt key(s, captured(audio.size()), realtime && interrupt);
            for (size_t i = 0; i < audio.size(); i += block) {
                const size_t n = std::min(block, audio.size() - i);
                if (realtime) std::this_thread::sleep_until(captured(i + n));
                s.push(audio.data() + i, n);
                for (const auto& e : s.poll()) stable = e.stable;
            }
            release = realtime ? captured(audio.size()) : std::chrono::steady_clock::now();
            fin = s.finish();
        }
        const double fms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - release).count();
        const bool kept = fin.raw_text.rfind(stable, 0) == 0;
        stable_revised += !kept;
        double worst_chunk = 0, sum_chunk = 0;
        const size_t n_steps = s.stats().size();
        const size_t n_chunk = s.endpoint_used() ? n_steps : (n_steps ? n_steps - 1 : 0); // the last step is finish()'s
        for (size_t i = 0; i < n_chunk; ++i) {
            worst_chunk = std::max(worst_chunk, s.stats()[i].ms);
            sum_chunk += s.stats()[i].ms;
            chunk_ms.push_back(s.stats()[i].ms);
            c_mel.push_back(s.stats()[i].mel_ms);
            c_enc.push_back(s.stats()[i].encoder_ms);
            c_pre.push_back(s.stats()[i].prefill_ms);
            c_dec.push_back(s.stats()[i].decode_ms);
        }
        for (const auto& cs : s.stats())
            drafted += cs.draft_tokens, accepted += cs.accepted_tokens, pause_steps += cs.pause,
                interrupted += cs.interrupted;
        endpoint_finals += s.endpoint_used();
        TranscribeOptions o;
        if (c.so.emulate_tokens_per_second > 0) { // same cap as the streamed final, same stop rules (EOS, repetition)
            o.decode.max_new_tokens = int(std::ceil(c.so.emulate_tokens_per_second * double(audio.size()) / 16000.0)) + 4;
        }
        o.language = c.so.language;
        o.context = c.so.context;
        o.itn = c.so.itn;
        TranscriptionResult off = t.transcribe(audio, o);
        const auto& tok = model->tokenizer;
        const int ed = edit_distance(tok.encode(fin.text), tok.encode(off.text));
        fin_ms.push_back(fms);
        // the final step's breakdown (none when finish() took the endpoint transcript)
        const StreamChunkStats last = n_steps && !s.endpoint_used() ? s.stats().back() : StreamChunkStats{};
        f_mel.push_back(last.mel_ms);
        f_enc.push_back(last.encoder_ms);
        f_pre.push_back(last.prefill_ms);
        f_dec.push_back(last.decode_ms);
        f_other.push_back(fms - last.mel_ms - last.encoder_ms - last.prefill_ms - last.decode_ms);
        std::printf("%s: %.2f s audio | finalization %.1f ms (mel %.1f, encoder %.1f for %d frames, prefill %.1f for %d "
                    "positions with %d draft tokens, %d accepted, decode %.1f for %d steps, %d tokens) | "
                    "chunks %zu, mean %.1f ms, worst %.1f ms | token edit distance to offline %d (%zu tokens)%s\n",
                    f.c_str(), fin.audio_seconds, fms, last.mel_ms, last.encoder_ms, last.encoder_frames, last.prefill_ms,
                    last.prefilled_tokens, last.draft_tokens, last.accepted_tokens, last.decode_ms, last.decode_steps,
                    last.generated_tokens,
                    n_chunk, n_chunk ? sum_chunk / double(n_chunk) : 0.0, worst_chunk, ed, tok.encode(off.text).size(),
                    fin.text == off.text ? " (identical)" : "");
        std::vector<double> per_minute; // median chunk compute per minute of stream position
        for (size_t m0 = 0;; ++m0) {
            std::vector<double> v;
            for (size_t i = 0; i < n_chunk; ++i)
                if (size_t(s.stats()[i].audio_seconds / 60.0) == m0) v.push_back(s.stats()[i].ms);
            if (v.empty()) break;
            per_minute.push_back(median(v));
        }
        if (per_minute.size() > 1) {
            std::printf("  per-chunk compute, median per minute of stream (ms):");
            for (double m : per_minute) std::printf(" %.1f", m);
            std::printf("\n");
        }
        per_file.push_back({{"file", f}, {"chunk_ms_median_per_minute", per_minute}, {"audio_seconds", fin.audio_seconds}, {"finalization_ms", fms},
                            {"final_step", {{"mel_ms", last.mel_ms}, {"encoder_ms", last.encoder_ms},
                                            {"encoder_frames", last.encoder_frames}, {"prefill_ms", last.prefill_ms},
                                            {"prefilled_tokens", last.prefilled_tokens}, {"draft_tokens", last.draft_tokens},
                                            {"accepted_tokens", last.accepted_tokens}, {"decode_ms", last.decode_ms},
                                            {"decode_steps", last.decode_steps}, {"generated_tokens", last.generated_tokens}}},
                            {"chunk_ms_worst", worst_chunk}, {"token_edit_distance", ed}, {"endpoint_final_used", s.endpoint_used()}, {"stable_text_kept", kept},
                            {"offline_tokens", tok.encode(off.text).size()}, {"identical", fin.text == off.text}});
    }
    double load1[1] = {0};
    ::getloadavg(load1, 1);
    nlohmann::json j = {{"finalization_ms_median", median(fin_ms)},
                        {"finalization_ms_worst", fin_ms.empty() ? 0 : *std::max_element(fin_ms.begin(), fin_ms.end())},
                        {"chunk_ms_median", median(chunk_ms)},
                        {"chunk_ms_worst", chunk_ms.empty() ? 0 : *std::max_element(chunk_ms.begin(), chunk_ms.end())},
                        {"finalization_breakdown_ms_median",
                         {{"mel", median(f_mel)}, {"encoder", median(f_enc)}, {"prefill", median(f_pre)},
                          {"decode", median(f_dec)}, {"other", median(f_other)}}},
                        {"chunk_breakdown_ms_median",
                         {{"mel", median(c_mel)}, {"encoder", median(c_enc)}, {"prefill", median(c_pre)}, {"decode", median(c_dec)}}},
                        {"draft_tokens", drafted},
                        {"pause_steps", pause_steps},
                        {"finals_revising_stable_text", stable_revised},
                        {"load_average_1min", {load0[0], load1[0]}},
                        {"endpoint_finals", endpoint_finals},
                        {"pause_seconds", c.so.pause_seconds},
                        {"endpoint_final", c.so.endpoint_final},
                        {"draft_accepted", accepted},
                        {"speculative", c.so.speculative},
                        {"realtime", realtime},
                        {"interrupt_at_release", realtime && interrupt},
                        {"interrupted_steps", interrupted},
                        {"exact_final", c.so.exact_final},
                        {"threads", ops::num_threads()},
                        {"chunk_seconds", c.so.chunk_seconds},
                        {"files", per_file}};
    std::printf("%s\n", json_text(j).c_str());
    return 0;
}

// The terminal's width in columns (80 when it does not say)
int terminal_columns() {
    winsize w{};
    return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col >= 10 ? int(w.ws_col) : 80;
}

} // namespace

int cmd_stream(int argc, char** argv) {
    Args a(argc, argv, 2);
    Common c;
    std::string file, v;
    CaptureOptions co;
    bool realtime = false, json = false, bench = false, interrupt = true, capture = false, list_devices = false;
    std::vector<std::string> files;
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (parse_common(a, c)) {
        } else if (a.option("--file", file)) {
        } else if (a.flag("--capture")) {
            capture = true;
        } else if (a.option("--capture-device", co.device)) {
            capture = true;
        } else if (a.flag("--list-devices")) {
            list_devices = true;
        } else if (a.flag("--ptt")) {
            co.ptt = true;
        } else if (a.option("--auto-finish", v)) {
            co.auto_finish = to_double("--auto-finish", v, 0.1, 60);
        } else if (a.option("--capture-seconds", v)) {
            co.seconds = to_double("--capture-seconds", v, 0.1, 86400);
        } else if (a.option("--save-audio", co.save_audio)) {
        } else if (a.flag("--realtime")) {
            realtime = true;
        } else if (a.flag("--no-interrupt")) {
            interrupt = false;
        } else if (a.flag("--json")) {
            json = true;
        } else if (a.flag("--bench") || a.flag("--stream")) {
            bench = true;
        } else if (a.peek().size() > 1 && a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek() + " (see qasr stream --help)");
        } else {
            files.push_back(a.next());
        }
    }
    if (list_devices) return list_capture_devices();
    if (c.model.empty()) throw std::invalid_argument("no model directory (-m DIR)");
    if ((co.ptt || co.seconds > 0 || co.auto_finish > 0) && !capture)
        throw std::invalid_argument("--ptt, --auto-finish and --capture-seconds need --capture");
    if (co.ptt && co.auto_finish > 0) throw std::invalid_argument("--ptt and --auto-finish: keys or pauses, choose one");
    if (capture && !file.empty()) throw std::invalid_argument("--capture and --file are two sources: give one");
    if (bench && (capture || !co.save_audio.empty()))
        throw std::invalid_argument("--bench replays files: no --capture or --save-audio");
    if (!c.so.language.empty()) c.so.language = canonical_language(c.so.language);
    if (bench) {
        if (!file.empty()) files.push_back(file);
        if (files.empty()) throw std::invalid_argument("--bench needs audio files");
        return run_bench(c, files, realtime, interrupt);
    }
    if (!files.empty()) throw std::invalid_argument("unexpected argument " + files[0] + " (use --file)");
    Transcriber t = Transcriber::load_with_warmup(c.model, c.lo);
    const bool tty = ::isatty(STDOUT_FILENO);
    size_t last_len = 0;
    auto on_event = [&](const StreamEvent& e) {
        if (json) {
            nlohmann::json j = {{"type", e.kind == StreamEvent::Kind::Final ? "final" : "partial"},
                                {"stable", e.stable}, {"unstable", e.unstable}, {"language", e.language},
                                {"t", e.audio_seconds}};
            std::cout << json_text(j) << std::endl;
        } else if (e.kind == StreamEvent::Kind::Final) {
            if (tty) std::cout << "\r\033[K";
            std::cout << e.text() << std::endl;
            last_len = 0;
        } else if (tty) {
            // one terminal line, rewritten in place: a partial wider than the line shows its end after "…" (a
            // wrapped line could not be rewritten)
            const std::string all = utf8::sanitize(e.stable + e.unstable);
            const size_t stable = std::min(e.stable.size(), all.size());
            const int cols = terminal_columns();
            size_t from = utf8::fitting_tail(all, cols - 1);
            if (from > 0) from = utf8::fitting_tail(all, cols - 2);
            std::cout << "\r\033[K" << (from ? "\u2026" : "") << all.substr(from, stable > from ? stable - from : 0)
                      << "\033[2m" << all.substr(std::max(from, stable)) << "\033[0m" << std::flush;
            last_len = e.text().size();
        }
    };
    auto on_result = [&](const TranscriptionResult& fin) { // --json --logprobs: a closing line per utterance
        nlohmann::json j = result_json(capture ? "capture" : file.empty() ? "-" : file, fin, t.impl().model->tokenizer);
        j["type"] = "result";
        std::cout << json_text(j) << std::endl;
    };
    if (json && c.so.logprobs) co.on_result = on_result;
    if (capture) return run_capture(t.impl().model, c.so, co, on_event);
    StreamSession s(t.impl().model, c.so, on_event);
    std::vector<float> kept; // --save-audio
    if (!file.empty()) {
        const std::vector<float> audio = load_audio_file(file);
        if (!co.save_audio.empty()) kept = audio;
        const size_t block = 1600;
        auto t0 = std::chrono::steady_clock::now();
        ReleaseAt key(s, t0 + std::chrono::microseconds(audio.size() * 1000 / 16), realtime && interrupt);
        for (size_t i = 0; i < audio.size(); i += block) {
            if (realtime) std::this_thread::sleep_until(t0 + std::chrono::milliseconds(i / 16));
            s.push(audio.data() + i, std::min(block, audio.size() - i));
        }
    } else {
        // stdin is read on its own thread, so that its end (the recorder stopped: the key was released) can
        // interrupt a step that push() is running. The state is shared, so that a reader left blocked in read()
        // after an error outlives this function safely.
        struct Input {
            std::mutex m;
            std::condition_variable cv;
            std::deque<std::vector<uint8_t>> blocks;
            bool eof = false;
            StreamSession* session = nullptr; // null once abandoned
        };
        auto in = std::make_shared<Input>();
        in->session = interrupt ? &s : nullptr;
        std::thread reader([in] {
            std::vector<uint8_t> buf(3200);
            for (;;) {
                const ssize_t n = ::read(STDIN_FILENO, buf.data(), buf.size());
                if (n <= 0) break;
                {
                    std::lock_guard<std::mutex> lk(in->m);
                    in->blocks.emplace_back(buf.begin(), buf.begin() + n);
                }
                in->cv.notify_one();
            }
            {
                std::lock_guard<std::mutex> lk(in->m);
                if (in->session) in->session->interrupt();
                in->eof = true;
            }
            in->cv.notify_one();
        });
        try {
            std::vector<uint8_t> pending; // an odd trailing byte waits for its pair
            for (;;) {
                {
                    std::unique_lock<std::mutex> lk(in->m);
                    in->cv.wait(lk, [&] { return !in->blocks.empty() || in->eof; });
                    if (in->blocks.empty()) break;
                    pending.insert(pending.end(), in->blocks.front().begin(), in->blocks.front().end());
                    in->blocks.pop_front();
                }
                const size_t even = pending.size() & ~size_t(1);
                if (!co.save_audio.empty()) {
                    const std::vector<float> x = pcm_s16le_to_float(pending.data(), even);
                    kept.insert(kept.end(), x.begin(), x.end());
                }
                s.push_s16le(pending.data(), even);
                pending.erase(pending.begin(), pending.begin() + long(even));
            }
        } catch (...) {
            {
                std::lock_guard<std::mutex> lk(in->m);
                in->session = nullptr;
            }
            reader.detach(); // blocked in read(); the error is reported and the process exits
            throw;
        }
        reader.join();
    }
    const TranscriptionResult fin = s.finish();
    if (co.on_result) co.on_result(fin);
    if (!co.save_audio.empty()) save_wav16(co.save_audio, kept);
    (void)last_len;
    return 0;
}

} // namespace qasr::cli
