// Transcriber: the public front door over Model (shared, immutable) and Session (one per call).
#include "backend/cpu/blas_core.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "audio/audio.hpp"
#include "ops/ops.hpp"
#include "pipeline/in_order.hpp"
#include "pipeline/long_audio.hpp"
#include "pipeline/progress.hpp"
#include "pipeline/segments.hpp"
#include "pipeline/session.hpp"
#include "pipeline/stream.hpp"
#include "qasr/qasr.hpp"
#include "api/transcriber_impl.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>

namespace qasr {

const char* finish_reason_name(FinishReason r) {
    switch (r) {
    case FinishReason::Eos: return "eos";
    case FinishReason::TokenCap: return "token_cap";
    case FinishReason::Repetition: return "repetition";
    case FinishReason::Empty: return "empty";
    }
    return "?";
}

std::string summary_line(const TranscriptionResult& r) {
    char buf[512];
    const double tps = r.timings.decode_ms > 0 ? 1000.0 * double(r.tokens.size()) / r.timings.decode_ms : 0.0;
    std::snprintf(buf, sizeof buf,
                  "qasr: audio %.2fs | load %.0f ms | mel %.1f ms | encode %.1f ms | prefill %.1f ms (%d tok) | "
                  "decode %.1f ms (%zu tok, %.1f tok/s) | RTF %.3f | finish %s",
                  r.audio_seconds, r.timings.load_ms, r.timings.mel_ms, r.timings.encode_ms, r.timings.prefill_ms,
                  r.n_prompt_tokens, r.timings.decode_ms, r.tokens.size(), tps, r.rtf, finish_reason_name(r.finish));
    return buf;
}

void check_load_options(const LoadOptions& opts) {
    if (opts.threads < 0 || opts.threads > 1024) fail("options", "threads must be in [0, 1024]");
    if (opts.max_batch < 1 || opts.max_batch > 1024) fail("options", "max_batch must be in [1, 1024]");
    if (opts.compute != "auto" && opts.compute != "bf16" && opts.compute != "f32")
        fail("options", "compute must be auto, bf16 or f32, got \"" + opts.compute + "\"");
    ops::set_num_threads(opts.threads);
    static std::once_flag blas_checked; // OpenBLAS on its pre-AVX kernels: a CPU newer than the library
    std::call_once(blas_checked, [] {
        if (const std::string a = cpu::blas_core_advice(); !a.empty())
            log(LogLevel::Warn, "OpenBLAS runs its " + cpu::blas_core() + " kernels on this CPU (a model it does not "
                                "know): the float32 products are ~3x slower than they can be; start the process with "
                                "OPENBLAS_CORETYPE=" + a + " in its environment (the qasr command does this itself)");
    });
}

std::string model_summary(const Model& m) {
    const HParams& hp = m.hp;
    char buf[320];
    std::snprintf(buf, sizeof buf, "%s layout (%s tensors): encoder %d×%d, decoder %d×%d, vocab %d%s",
                  hp.layout.c_str(), m.weights.scheme.c_str(), hp.audio.n_layers, hp.audio.d_model, hp.text.n_layers,
                  hp.text.hidden, hp.text.vocab_size,
                  hp.aligner.classes ? (", aligner " + std::to_string(hp.aligner.classes) + " classes").c_str() : "");
    return buf;
}

Transcriber::Transcriber(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Transcriber::Transcriber(Transcriber&&) noexcept = default;
Transcriber& Transcriber::operator=(Transcriber&&) noexcept = default;
Transcriber::~Transcriber() = default;

Transcriber Transcriber::load(const std::string& model_dir, const LoadOptions& opts) {
    check_load_options(opts);
    auto impl = std::make_unique<Impl>();
    impl->model = Model::load(model_dir, opts.device, opts.compute);
    if (impl->model->hp.aligner.classes)
        fail("loader", model_dir + " is a forced aligner (Qwen3-ForcedAligner): it times the words of a known "
                                   "transcript (qasr align, --aligner, qasr::Aligner) and does not transcribe");
    if (opts.max_batch > 1) impl->engine = std::make_unique<BatchEngine>(impl->model, opts.max_batch);
    impl->max_batch = opts.max_batch;
    return Transcriber(std::move(impl));
}

Transcriber Transcriber::load_with_warmup(const std::string& model_dir, const LoadOptions& opts) {
    Transcriber t = load(model_dir, opts);
    t.warmup();
    return t;
}

void Transcriber::warmup() const {
    // The seed's recipe: low-amplitude noise (silence would stop at once), sampled first so the decode loop really
    // runs, then a short greedy pass. On the CPU the cold-start cost is paging in the mapped weights and starting
    // the thread team, which every decode step touches in full, so a 2 s clip and a few steps suffice (the 8 s of
    // the GPU recipe exist to build realistic kernel batch shapes).
    // On an accelerator: 8 s of noise sampled at temperature 1 (builds the encoder's scratch at realistic shapes,
    // creates the cuBLAS handle and captures the decode-step graph), then short greedy passes over 30, 20, 10, 5, 4,
    // 2 and 1 s, so the pooled session's scratch and KV cache fit the usual requests and every band of product
    // shapes a request up to 30 s long uses (M ≤ 32, ≤ 64, … ≤ 512 rows: backend/cuda/gemm.hpp) has its algorithm
    // and kernels loaded. None of these is the benchmarks' 11 s, so that the first transcription after the warm-up is
    // measured on a length the warm-up has not run. Its passes are not recorded as graphs for later requests (a
    // recording made each next pass wait 25–35 ms, and real requests are not of these lengths).
    const bool dev = impl_->model->device != nullptr;
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> u(-0.01f, 0.01f);
    std::vector<float> noise(size_t(dev ? 30 : 2) * kSampleRate);
    for (float& x : noise) x = u(rng);
    TranscribeOptions o;
    o.itn = false;
    o.decode.temperature = 1.0f;
    o.decode.max_new_tokens = dev ? 8 : 4;
    Stopwatch sw;
    std::string passes;
    const auto pass = [&](const std::vector<float>& a) {
        const double t0 = sw.ms();
        Session session(impl_->model);
        session.record_device_passes(false);
        // with a batch engine, on its thread (its OpenMP team and buffers are the ones requests will use)
        const TranscriptionResult r = impl_->engine ? impl_->engine->run(a, o) : session.run(a, o);
        const Timings& t = r.timings;
        char b[128];
        std::snprintf(b, sizeof b, "%s%.0f s %.0f ms [mel %.0f enc %.0f pre %.0f dec %.0f]", passes.empty() ? "" : ", ",
                      double(a.size()) / kSampleRate, sw.ms() - t0, t.mel_ms, t.encode_ms, t.prefill_ms, t.decode_ms);
        passes += b;
    };
    pass(dev ? std::vector<float>(noise.begin(), noise.begin() + 8 * kSampleRate) : noise);
    o.decode.temperature = 0.0f;
    o.decode.max_new_tokens = dev ? 4 : 2;
    if (!dev) {
        pass(noise);
        impl_->model->head_screen(); // the LM head's row norms for streams' draft verification (~75 ms, once)
    } else {
        for (int seconds : {30, 20, 10, 5, 4, 2, 1})
            pass(std::vector<float>(noise.begin(), noise.begin() + seconds * kSampleRate));
    }
    log(LogLevel::Info, "warm-up: " + std::to_string(int(sw.ms() + 0.5)) + " ms (" + passes + ")");
}

TranscriptionResult Transcriber::transcribe_file(const std::string& path, const TranscribeOptions& opts) const {
    return transcribe(load_audio_file(path), opts);
}

TranscriptionResult Transcriber::transcribe_memory(const void* data, size_t size, const TranscribeOptions& opts) const {
    if (!data && size) throw std::invalid_argument("transcribe_memory: null data");
    return transcribe(load_audio_bytes(static_cast<const uint8_t*>(data), size, "audio in memory"), opts);
}

TranscriptionResult Transcriber::transcribe(const std::vector<float>& samples, const TranscribeOptions& opts) const {
    if (opts.offset_seconds != 0 || opts.duration_seconds != 0) { // the part [offset, offset + duration)
        if (!(opts.offset_seconds >= 0 && opts.offset_seconds <= 1e7) ||
            !(opts.duration_seconds >= 0 && opts.duration_seconds <= 1e7))
            fail("options", "offset_seconds and duration_seconds must be between 0 and 1e7");
        const size_t b = size_t(std::llround(opts.offset_seconds * kSampleRate));
        if (b >= samples.size())
            fail("options", "offset " + seconds_text(opts.offset_seconds) + " is at or past the end of the audio (" +
                                seconds_text(double(samples.size()) / kSampleRate) + ")");
        const size_t e = opts.duration_seconds > 0
                             ? std::min(samples.size(), b + size_t(std::llround(opts.duration_seconds * kSampleRate)))
                             : samples.size();
        const auto shifted = [shift = double(b) / kSampleRate](Segment& s) { // to the microsecond: no 8.530000000000001
            s.start = std::round((s.start + shift) * 1e6) / 1e6;
            s.end = std::round((s.end + shift) * 1e6) / 1e6;
        };
        TranscribeOptions o = opts;
        o.offset_seconds = o.duration_seconds = 0;
        if (opts.on_segment)
            o.on_segment = [&](const Segment& s) {
                Segment t = s;
                shifted(t);
                opts.on_segment(t);
            };
        TranscriptionResult r = transcribe(std::vector<float>(samples.begin() + long(b), samples.begin() + long(e)), o);
        for (Segment& s : r.segments) shifted(s);
        return r;
    }
    if (!(opts.max_piece_seconds >= 10.0)) fail("options", "max_piece_seconds must be at least 10");
    const Stopwatch wall;
    check_finite(samples.data(), samples.size(), "audio samples");
    const bool segmented = opts.segment_seconds != 0;
    if (segmented && !(opts.segment_seconds >= 2.0 && opts.segment_seconds <= opts.max_piece_seconds))
        fail("options", "segment_seconds must be 0 (off) or between 2 and max_piece_seconds");
    std::unique_ptr<Session> own;
    const auto run = [&](const std::vector<float>& a, const TranscribeOptions& o) {
        if (impl_->engine) return impl_->engine->run(a, o);
        if (!own) own = std::make_unique<Session>(impl_->model);
        return own->run(a, o);
    };
    const float quiet = quiet_level(samples);
    const auto pieces = segmented ? split_at_pauses(samples, opts.segment_seconds, kSampleRate, quiet)
                                  : split_long_audio(samples, opts.max_piece_seconds);
    const auto seconds = [](size_t i) { return double(i) / kSampleRate; };
    // The piece [b, e)'s segment (none for an empty text): times are its speech extent [sb, se), the whole piece
    // without one
    const auto add_segment = [&](std::vector<Segment>& out, const TranscriptionResult& r, size_t b, size_t e,
                                 std::pair<size_t, size_t> speech, size_t first_token) {
        if (r.text.empty()) return;
        if (speech.first == speech.second) speech = {b, e};
        out.push_back({seconds(speech.first), seconds(speech.second), r.text, r.language, first_token,
                       r.tokens.size()});
        if (opts.on_segment) opts.on_segment(out.back());
    };
    // on_progress: what the caller sees (pipeline/progress.hpp); a piece's own estimate is scaled to its share
    ProgressSink progress(opts.on_progress);
    progress.report(0);
    if (pieces.size() == 1 && !segmented) {
        TranscribeOptions o;
        if (progress) {
            o = opts;
            o.on_progress = [&progress](float g) { progress.report(g); };
        }
        TranscriptionResult r = run(samples, progress ? o : opts);
        add_segment(r.segments, r, 0, samples.size(), speech_extent(samples, 0, samples.size(), quiet), 0);
        progress.done();
        return r;
    }
    // Independent requests per piece (spec §8.1); long-audio texts joined without a separator (§7.5), segments'
    // with a space where the script has them; pieces without speech are skipped. With a batch engine up to
    // max_batch pieces run at once (their decode steps batch together); the result is the same.
    TranscriptionResult all;
    std::vector<std::string> langs;
    std::vector<size_t> jobs; // the pieces to transcribe
    std::vector<std::pair<size_t, size_t>> speech(pieces.size());
    for (size_t k = 0; k < pieces.size(); ++k) {
        speech[k] = speech_extent(samples, pieces[k].first, pieces[k].second, quiet);
        if (!segmented || speech[k].first != speech[k].second) jobs.push_back(k); // else: no speech in this piece
    }
    // on_text: the pieces' deltas in order, joined as the texts are (the long-audio pieces without a separator);
    // with pieces running at once each piece's deltas wait until it is taken
    const int parallel = impl_->engine ? impl_->max_batch : 1;
    std::string tail;          // the end of the text given out so far (its last characters)
    bool piece_start = true;   // the next delta is a piece's first
    const bool deltas = opts.on_text || opts.on_text_tokens;
    const auto give = [&](const std::string& d, const std::vector<TokenInfo>& tokens) {
        const std::string joined = piece_start && segmented ? segment_joiner(tail, d) + d : d;
        if (opts.on_text) opts.on_text(joined);
        if (opts.on_text_tokens) opts.on_text_tokens(joined, tokens);
        piece_start = false;
        tail += d; // its last bytes are enough for the joiner's test
        if (tail.size() > 8) tail.erase(0, tail.size() - 8);
    };
    using Delta = std::pair<std::string, std::vector<TokenInfo>>;
    std::vector<std::vector<Delta>> held(deltas && parallel > 1 ? jobs.size() : 0);
    size_t taken = 0;
    // progress: the pieces by their samples (those without speech are not transcribed and do not count); one piece
    // at a time reports its own estimate, pieces at once report as each is taken
    const bool one_at_a_time = parallel <= 1 || jobs.size() <= 1;
    double all_samples = 0, taken_samples = 0;
    for (size_t k : jobs) all_samples += double(pieces[k].second - pieces[k].first);
    run_in_order<TranscriptionResult>(
        jobs.size(), parallel,
        [&](size_t j) {
            const auto [b, e] = pieces[jobs[j]];
            const std::vector<float> piece(samples.begin() + long(b), samples.begin() + long(e));
            if (!deltas && !(progress && one_at_a_time)) return run(piece, opts);
            TranscribeOptions o = opts;
            o.on_text = nullptr;
            if (deltas && held.empty()) o.on_text_tokens = give; // one piece at a time: given out as it comes
            else if (deltas)
                o.on_text_tokens = [&held, j](const std::string& d, const std::vector<TokenInfo>& t) { held[j].emplace_back(d, t); };
            o.on_progress = nullptr;
            if (progress && one_at_a_time)
                o.on_progress = [&, n = double(e - b)](float g) { progress.report((taken_samples + n * g) / all_samples); };
            return run(piece, o);
        },
        [&](TranscriptionResult& r) {
            if (!held.empty())
                for (const auto& [d, t] : held[taken]) give(d, t);
            piece_start = true;
            const size_t k = jobs[taken++];
            taken_samples += double(pieces[k].second - pieces[k].first);
            progress.report(taken_samples / all_samples);
            const size_t first_token = all.tokens.size();
            if (segmented) append_segment_text(all.text, r.text);
            else all.text += r.text;
            all.raw_text += r.raw_text;
            langs.push_back(r.language);
            all.language_probability =
                langs.size() == 1 ? r.language_probability : std::min(all.language_probability, r.language_probability);
            all.tokens.insert(all.tokens.end(), r.tokens.begin(), r.tokens.end());
            all.n_prompt_tokens += r.n_prompt_tokens;
            all.n_audio_tokens += r.n_audio_tokens;
            all.timings.mel_ms += r.timings.mel_ms;
            all.timings.encode_ms += r.timings.encode_ms;
            all.timings.prefill_ms += r.timings.prefill_ms;
            all.timings.decode_ms += r.timings.decode_ms;
            all.finish = r.finish;
            add_segment(all.segments, r, pieces[k].first, pieces[k].second, speech[k], first_token);
        });
    all.language = merge_languages(langs);
    all.timings.load_ms = impl_->model->load_ms;
    all.audio_seconds = double(samples.size()) / kSampleRate;
    // The stage times are sums over the pieces, which overlap when they run max_batch at a time: the RTF is the
    // call's wall time
    all.rtf = all.audio_seconds > 0 ? wall.ms() / 1000.0 / all.audio_seconds : 0.0;
    progress.done();
    return all;
}

double Transcriber::load_ms() const { return impl_->model->load_ms; }

std::string Transcriber::model_summary() const { return qasr::model_summary(*impl_->model); }

} // namespace qasr

namespace qasr {

Stream::Stream(std::unique_ptr<StreamSession> s) : s_(std::move(s)) {}
Stream::Stream(Stream&&) noexcept = default;
Stream& Stream::operator=(Stream&&) noexcept = default;
Stream::~Stream() = default;
void Stream::push(const float* samples, size_t n) { s_->push(samples, n); }
void Stream::push_s16le(const uint8_t* bytes, size_t n) { s_->push_s16le(bytes, n); }
std::vector<StreamEvent> Stream::poll() { return s_->poll(); }
TranscriptionResult Stream::finish() { return s_->finish(); }
void Stream::interrupt() { s_->interrupt(); }
double Stream::trailing_quiet_seconds() const { return s_->trailing_quiet_seconds(); }

Stream Transcriber::open_stream(const StreamOptions& opts, Stream::Callback cb) const {
    return Stream(std::make_unique<StreamSession>(impl_->model, opts, std::move(cb)));
}

} // namespace qasr
