// `qasr serve -m DIR`: the HTTP server's command line — options, model loading with warm-up, and a signal watcher
// that turns SIGINT/SIGTERM into a graceful stop (requests in progress finish, then the process exits 0).
#include "args.hpp"
#include "commands.hpp"
#include "stop_signals.hpp"

#include "qasr/qasr.hpp"
#include "text/output.hpp"

#ifdef QASR_HAVE_SERVER
#include "serve.hpp"

#include <atomic>
#include <chrono>
#include <csignal>
#include <unistd.h>
#include <thread>
#endif

#include <algorithm>
#include <cstdio>
#include <thread>
#include <cstdlib>
#include <stdexcept>
#include <memory>
#include <string>

namespace qasr::cli {

#ifdef QASR_HAVE_SERVER
namespace {

const char* kHelp = R"(usage: qasr serve -m MODEL_DIR [options]

Serves transcription over HTTP until SIGINT/SIGTERM (requests in progress finish first).

  POST /v1/audio/transcriptions   OpenAI's API: multipart/form-data with `file` (WAV; mp3, flac, ogg/opus, m4a,
                                  webm with FFmpeg) and optional `language` (en, English, auto), `prompt`
                                  (context: names, terms), `response_format` (json | text | verbose_json with
                                  segments | srt | vtt), `temperature`, and qasr's `itn` (true|false),
                                  `segment_seconds` (cut at pauses into pieces of at most this many seconds for
                                  segment times; 10 for srt/vtt and timestamp_granularities[]=segment unless
                                  given, else 0: whole), `max_new_tokens`,
                                  `top_p`, `seed`, `beam_size` (1..16: beam search), `length_penalty`,
                                  `ignore_eos` (with max_new_tokens: benchmarks on random weights),
                                  include[]=logprobs (json, verbose_json: OpenAI's "logprobs", the
                                  transcript's tokens with log-probabilities, before ITN).
                                  The audio may also be the raw request body, the fields then query parameters.
  POST /inference                 the same (whisper.cpp's server path)
  POST /v1/streams                live dictation: opens a stream (fields language, prompt, itn, chunk_seconds,
                                  pause_seconds, logprobs: the final's tokens) → {"id": ID}
  POST /v1/streams/ID/audio       raw 16 kHz mono s16le PCM as it is recorded → the partial text so far
                                  {"stable", "unstable", "text", ...}
  POST /v1/streams/ID/finish      the final transcript (response_format as above; segments: the stream's);
                                  push-to-talk: on key release
  GET, DELETE /v1/streams/ID      the partial text; drop the stream
  GET  /health                    {"status": "ok", "running", "waiting", "streams", ...}
  GET  /v1/models                 the loaded model
  GET  /metrics                   Prometheus counters: requests by route and status, latency, audio seconds

  curl -F file=@samples/demo_en.wav http://127.0.0.1:8080/v1/audio/transcriptions
  curl --data-binary @a.wav -H 'Content-Type: audio/wav' 'http://127.0.0.1:8080/inference?response_format=text'

options:
  -m, --model DIR          model directory
  --host ADDR              address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)
  --port N                 port (default 8080; 0: any free port — the line "listening on ..." names it)
  --device D               cpu (default), cuda or cuda:N
  --compute C              the CPU's matrix-matrix products: auto (bf16 for quantized checkpoints, float32
                           for float ones; default), bf16 (about half the encoder/prefill time on AMX or
                           AVX512-BF16 CPUs) or f32
  -t, --threads N          CPU threads per transcription (default: the cores divided by --parallel)
  --parallel N             transcriptions at once (default 1 on the CPU, 4 on a GPU; with --batch, the batch);
                           each has its own session
  --batch N                the running transcriptions decode together, up to N per step, on one engine thread
                           (each step reads the weights once for all). CPU: with all cores, same transcripts bit
                           for bit. GPU: encoder and prefill on each request's stream, the steps batched (≤ 128;
                           the fast path ≤ 16 rows, bf16 or MLX 4/6/8-bit weights)
  --max-queue N            requests that may wait for a slot (default 16); more are answered 503 at once
  --max-body-mb N          largest request body in MiB (default 100); larger is answered 413
  --max-audio-seconds S    longest audio (default 3600); longer is answered 413, checked while decoding
  --max-prompt-bytes N     longest prompt/context field (default 4096 bytes); longer is answered 400
  --max-new-tokens N       largest max_new_tokens a request may ask (default 0: any the model's positions
                           allow); more is answered 400 (the automatic cap, ceil(seconds*20)+64, is not limited)
  --max-streams N          live streams open at once (default 16); more are answered 503
  --stream-idle-seconds S  a stream without a request for this long is dropped (default 60)
  --api-key KEY            require "Authorization: Bearer KEY" (default: $QASR_API_KEY if set)
  --cors ORIGIN            allow browser pages from ORIGIN ("*": any) to call the server (CORS headers, preflights)
  --language L             default language for requests without one (default: detect)
  --context TEXT           default context
  --aligner DIR            a Qwen3-ForcedAligner checkpoint: requests may ask for word timestamps
                           (response_format=verbose_json, timestamp_granularities[]=word → "words")
  --no-itn                 no inverse text normalization unless a request asks for it (itn=true)
  --no-warmup              skip the warm-up transcription after loading
  -q, --quiet              no per-request log lines
  -v, --verbose            diagnostics on stderr (load and warm-up stage times)
  -h, --help               this help
)";

// SIGINT/SIGTERM (stop_signals.hpp) on a watcher thread: before the server listens a signal ends the process at
// once; after, it stops the server gracefully.
class SignalWatcher {
public:
    SignalWatcher() {
        th_ = std::thread([this] {
            const int sig = signals_.next();
            if (sig <= 0 || done_.load()) return;
            if (!serving_.load()) {
                std::fprintf(stderr, "qasr serve: interrupted while loading\n");
                std::_Exit(128 + sig);
            }
            std::fprintf(stderr, "qasr serve: stopping (requests in progress finish first)\n");
            while (!done_.load()) { // repeated: a stop made just before the server listens is not lost
                ctl_.stop();
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
            }
        });
    }
    ~SignalWatcher() {
        done_ = true;
        signals_.wake(); // if no signal came
        th_.join();
    }
    ServerControl& control() { return ctl_; }
    void serving() { serving_ = true; }

private:
    StopSignals signals_;
    ServerControl ctl_;
    std::atomic<bool> serving_{false}, done_{false};
    std::thread th_;
};

} // namespace

int cmd_serve(int argc, char** argv) {
    Args a(argc, argv, 2);
    std::string model, aligner_dir, v;
    ServeOptions o;
    LoadOptions lo;
    int parallel = 0;
    bool warm = true;
    if (const char* k = std::getenv("QASR_API_KEY")) o.api_key = k;
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a.option("-m", model) || a.option("--model", model)) {
        } else if (a.option("--host", o.host)) {
        } else if (a.option("--port", v)) {
            o.port = int(to_long("--port", v, 0, 65535));
        } else if (load_option(a, lo)) {
        } else if (a.option("--parallel", v)) {
            parallel = int(to_long("--parallel", v, 1, 256));
        } else if (a.option("--batch", v)) {
            lo.max_batch = int(to_long("--batch", v, 1, 1024));
        } else if (a.option("--max-queue", v)) {
            o.max_queue = int(to_long("--max-queue", v, 0, 100000));
        } else if (a.option("--max-body-mb", v)) {
            o.max_body_bytes = size_t(to_long("--max-body-mb", v, 1, 1 << 20)) << 20;
        } else if (a.option("--max-audio-seconds", v)) {
            o.max_audio_seconds = to_double("--max-audio-seconds", v, 1, 1e7);
        } else if (a.option("--max-prompt-bytes", v)) {
            o.max_prompt_bytes = size_t(to_long("--max-prompt-bytes", v, 0, 1 << 24));
        } else if (a.option("--max-new-tokens", v)) {
            o.max_new_tokens = int(to_long("--max-new-tokens", v, 0, 100000));
        } else if (a.option("--max-streams", v)) {
            o.max_streams = int(to_long("--max-streams", v, 0, 100000));
        } else if (a.option("--stream-idle-seconds", v)) {
            o.stream_idle_seconds = to_double("--stream-idle-seconds", v, 1, 86400);
        } else if (a.option("--api-key", o.api_key)) {
        } else if (a.option("--cors", o.cors_origin)) {
        } else if (a.option("--language", v)) {
            o.defaults.language = canonical_language(v);
        } else if (a.option("--aligner", aligner_dir)) {
        } else if (a.option("--context", o.defaults.context)) {
        } else if (a.flag("--no-itn")) {
            o.defaults.itn = false;
        } else if (a.flag("--no-warmup")) {
            warm = false;
        } else if (a.flag("-q") || a.flag("--quiet")) {
            o.log_requests = false;
        } else if (a.flag("-v") || a.flag("--verbose")) {
            log_verbose();
        } else {
            throw std::invalid_argument("unknown option " + a.peek() + " (see qasr serve --help)");
        }
    }
    if (model.empty()) throw std::invalid_argument("no model directory (-m DIR)");
    const bool gpu = lo.device.rfind("cuda", 0) == 0;
    o.parallel = parallel ? parallel : lo.max_batch > 1 ? lo.max_batch : gpu ? 4 : 1;
    // On the CPU each transcription's threads share the cores with the other running ones: without --threads, split
    // the cores between them (2 cores, demo model, 4 clients: --parallel 2 with 2 threads each 13 requests/s, with 1
    // thread each 67, --parallel 1 with 2 threads 37). With --batch one engine thread runs them all on every core.
    if (!gpu && lo.threads == 0 && o.parallel > 1 && lo.max_batch == 1)
        lo.threads = std::max(1, int(std::thread::hardware_concurrency()) / o.parallel);
    o.device = lo.device;
    o.model_name = model;
    while (o.model_name.size() > 1 && o.model_name.back() == '/') o.model_name.pop_back();
    if (const auto p = o.model_name.find_last_of('/'); p != std::string::npos) o.model_name = o.model_name.substr(p + 1);
    SignalWatcher sig;
    const Transcriber t = warm ? Transcriber::load_with_warmup(model, lo) : Transcriber::load(model, lo);
    std::unique_ptr<Aligner> aligner;
    if (!aligner_dir.empty()) {
        LoadOptions al = lo;
        al.max_batch = 1;
        aligner = std::make_unique<Aligner>(Aligner::load(aligner_dir, al));
        o.aligner = aligner.get();
        std::fprintf(stderr, "qasr serve: word timestamps from %s\n", aligner->model_summary().c_str());
    }
    std::fprintf(stderr, "qasr serve: %s on %s, %d at once%s, %d may wait\n", t.model_summary().c_str(),
                 o.device.c_str(), o.parallel, lo.max_batch > 1 ? (", decoding together up to " + std::to_string(lo.max_batch)).c_str() : "",
                 o.max_queue);
    sig.serving();
    run_server(t, o, sig.control());
    std::fprintf(stderr, "qasr serve: stopped\n");
    return 0;
}

#else

int cmd_serve(int, char**) {
    throw std::invalid_argument("this qasr was built without the HTTP server: install libcpp-httplib-dev and "
                                "rebuild (-DQASR_SERVER=ON)");
}

#endif

} // namespace qasr::cli
