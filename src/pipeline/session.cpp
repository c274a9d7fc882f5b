// The offline transcription pipeline with its guardrails: < 400 samples → empty result; token cap; EOS set;
// repetition stop (one id more than `repetition_limit` times in a row); --ignore-eos for fixed-length decoding.
#include "pipeline/session.hpp"

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"
#include "text/output.hpp"
#include "text/postprocess.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

namespace qasr {

int default_token_cap(double seconds) { return int(std::ceil(seconds * 20.0)) + 64; }

Session::Session(std::shared_ptr<const Model> model)
    : model_(std::move(model)), accel_(model_->device ? model_->device->open() : nullptr),
      decoder_(model_->weights.dec, model_->hp.text) {}

PassHook Session::stop_hook(PieceProgress::Stage s) const {
    if (!st_.abort && !st_.progress) return {};
    return [this, s](double done) {
        if (st_.progress) st_.progress->stage(s, done);
        return st_.abort && st_.abort();
    };
}

Tensor Session::mel(const std::vector<float>& audio, size_t min_samples) const {
    const PassHook hook = stop_hook(PieceProgress::Stage::Mel);
    Tensor m = model_->mel.compute(audio, min_samples, &hook);
    if (m.size() == 0) cancelled(); // stopped between blocks of frames
    return m;
}

Tensor Session::encode(const Tensor& mel, const TapFn* tap) const {
    if (accel_) {
        if (tap) fail("session", "tap points are only available on the CPU path");
        return accel_->encode(mel);
    }
    const PassHook hook = stop_hook(PieceProgress::Stage::Encoder);
    Tensor rows = encode_audio(model_->weights.enc, model_->hp.audio, mel, tap, &hook);
    if (rows.size() == 0) cancelled(); // the pass stopped between layers
    return rows;
}

void Session::cancelled() { throw Cancelled("session", "the transcription was cancelled (TranscribeOptions::abort)"); }

void Session::check_kv_memory(int64_t positions, int sessions, const char* what) const {
    const TextHParams& hp = model_->hp.text;
    const uint64_t per_position = uint64_t(hp.n_layers) * 2 * uint64_t(hp.n_kv_heads) * uint64_t(hp.head_dim) *
                                  (kv_cache_bf16(model_->weights.dec.bf16_compute) ? 2 : 4);
    const uint64_t held = uint64_t(std::max<int64_t>(0, cache_.cap)) * per_position; // this session's arena
    const uint64_t need = per_position * uint64_t(positions) * uint64_t(sessions), avail = available_memory_bytes();
    if (!avail || need <= held || need - held <= avail) return;
    const auto size = [](uint64_t b) {
        char t[32];
        std::snprintf(t, sizeof t, b >= (uint64_t(1) << 30) ? "%.2f GiB" : "%.1f MiB",
                      double(b) / double(b >= (uint64_t(1) << 30) ? 1 << 30 : 1 << 20));
        return std::string(t);
    };
    char msg[400];
    std::snprintf(msg, sizeof msg,
                  "%s needs up to %s of KV cache (%d × %lld positions), more than the %s of memory available: "
                  "transcribe shorter pieces (segment_seconds, max_piece_seconds)%s",
                  what, size(need).c_str(), sessions, (long long)positions, size(avail).c_str(),
                  sessions > 1 ? ", use fewer beams or a smaller max_new_tokens" : "");
    throw OutOfMemory("session", msg);
}

void Session::check_abort() const {
    if (st_.abort && st_.abort()) cancelled();
}

Prompt Session::prompt(int64_t n_audio, const TranscribeOptions& opts) const {
    const std::string lang = opts.language.empty() ? "" : canonical_language(opts.language);
    return build_prompt(model_->tokenizer, model_->special, n_audio, opts.context, lang);
}

Tensor Session::prefill(const Prompt& p, const Tensor& audio_rows, bool all_logits, const TapFn* tap) {
    const int64_t D = model_->hp.text.hidden;
    if (audio_rows.rows() != p.n_audio || (p.n_audio && audio_rows.cols() != D))
        fail("session", "audio rows " + shape_str(audio_rows.shape) + " do not fill " + std::to_string(p.n_audio) +
                            " placeholders of width " + std::to_string(D));
    if (accel_) {
        if (tap) fail("session", "tap points are only available on the CPU path");
        return accel_->prefill(p.ids, p.audio_begin, audio_rows, all_logits ? -1 : 1);
    }
    cache_.reset(model_->weights.dec.layers.size());
    Tensor x = decoder_.embed(p.ids);
    if (p.n_audio)
        std::memcpy(x.ptr() + p.audio_begin * D, audio_rows.ptr(), size_t(p.n_audio * D) * sizeof(float));
    if (tap) (*tap)("dec_in", x);
    const PassHook hook = stop_hook(PieceProgress::Stage::Prefill);
    Tensor h = decoder_.forward(std::move(x), cache_, tap, &hook);
    if (h.size() == 0) cancelled(); // the pass stopped between layers
    if (all_logits) return decoder_.logits(h);
    Tensor last({1, D});
    std::memcpy(last.ptr(), h.row(h.rows() - 1), size_t(D) * sizeof(float));
    return decoder_.logits(last);
}

Tensor Session::encode_samples(const std::vector<float>& audio, size_t min_samples, Timings& t) const {
    Stopwatch sw;
    Tensor rows;
    if (accel_) { // log-mel and encoder on the device
        rows = accel_->encode_audio(audio, min_samples, &t.mel_ms);
        t.encode_ms = sw.ms() - t.mel_ms;
        stage_done(PieceProgress::Stage::Encoder);
        return rows;
    }
    const Tensor m = mel(audio, min_samples);
    t.mel_ms = sw.ms();
    stage_done(PieceProgress::Stage::Mel);
    sw.reset();
    rows = encode(m);
    t.encode_ms = sw.ms();
    stage_done(PieceProgress::Stage::Encoder);
    return rows;
}

Tensor Session::step(int token) {
    if (accel_) return accel_->step(token);
    Tensor h = decoder_.forward(decoder_.embed({token}), cache_);
    return decoder_.logits(h);
}

int Session::choose(const float* logits, int64_t V, const DecodeOptions& d, float& logprob) {
    int64_t pick = 0;
    if (d.temperature <= 0.0f) {
        return int(ops::argmax_logprob(logits, V, -1, logprob)); // ties resolve to the lowest id, as torch.argmax
    } else {
        std::vector<std::pair<float, int64_t>> p(static_cast<size_t>(V));
        const float mx = *std::max_element(logits, logits + V);
        double sum = 0;
        for (int64_t i = 0; i < V; ++i) {
            const float e = std::exp((logits[i] - mx) / d.temperature);
            p[size_t(i)] = {e, i};
            sum += e;
        }
        std::sort(p.begin(), p.end(), [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
        double keep = 0;
        size_t n_keep = 0;
        for (; n_keep < p.size(); ++n_keep) {
            keep += p[n_keep].first / sum;
            if (keep >= double(d.top_p)) {
                ++n_keep;
                break;
            }
        }
        n_keep = std::max<size_t>(1, std::min(n_keep, p.size()));
        double total = 0;
        for (size_t i = 0; i < n_keep; ++i) total += p[i].first;
        double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
        pick = p[n_keep - 1].second;
        for (size_t i = 0; i < n_keep; ++i) {
            r -= p[i].first;
            if (r < 0) {
                pick = p[i].second;
                break;
            }
        }
    }
    ops::argmax_logprob(logits, V, pick, logprob);
    return int(pick);
}

// Records token `tok` and applies the stop rules; false = stop (the token is kept when it is an EOS).
bool Session::accept(int tok, float lp, const DecodeOptions& d, std::vector<int>& out, int& run_len,
                     TranscriptionResult& r) const {
    if (!d.ignore_eos) {
        run_len = (!out.empty() && out.back() == tok) ? run_len + 1 : 1;
        if (d.repetition_limit > 0 && run_len > d.repetition_limit) {
            r.finish = FinishReason::Repetition;
            return false;
        }
        r.tokens.push_back({tok, lp});
        if (model_->is_eos(tok)) {
            r.finish = FinishReason::Eos;
            return false;
        }
        if (tok == st_.stop_id) { // language_only: the tag is complete; kept in the text so that it parses
            out.push_back(tok);
            r.finish = FinishReason::Eos;
            return false;
        }
    } else {
        r.tokens.push_back({tok, lp});
    }
    out.push_back(tok);
    if (st_.deltas) st_.deltas->push(tok, lp);
    return true;
}

bool Session::begin(const std::vector<float>& audio, const TranscribeOptions& opts) {
    st_ = Pending();
    TranscriptionResult& r = st_.r;
    r.audio_seconds = double(audio.size()) / 16000.0;
    r.timings.load_ms = model_->load_ms;
    const DecodeOptions& d = st_.d = opts.decode;
    if (d.max_new_tokens < 0) fail("options", "max_new_tokens must be ≥ 0");
    if (d.ignore_eos && d.max_new_tokens <= 0) fail("options", "ignore_eos needs an explicit max_new_tokens");
    if (!(d.temperature >= 0.0f && d.temperature <= 100.0f)) fail("options", "temperature must be in [0, 100]");
    if (!(d.top_p > 0.0f && d.top_p <= 1.0f)) fail("options", "top_p must be in (0, 1]");
    if (d.beam_size < 1 || d.beam_size > 16) fail("options", "beam_size must be in [1, 16]");
    if (!(d.length_penalty >= -10.0f && d.length_penalty <= 10.0f)) fail("options", "length_penalty must be in [-10, 10]");
    if (d.beam_size > 1) {
        if (d.temperature > 0.0f) fail("options", "beam search decodes without sampling: it needs temperature 0");
        if (d.ignore_eos) fail("options", "beam search cannot be combined with ignore_eos");
        if (opts.language_only) fail("options", "language_only decodes greedily: it cannot be combined with beam search");
    }
    st_.forced = opts.language.empty() ? "" : canonical_language(opts.language);
    if (opts.language_only && !st_.forced.empty())
        fail("options", "language_only detects the language: it cannot be combined with a forced language");
    if (opts.language_only && d.ignore_eos) fail("options", "language_only cannot be combined with ignore_eos");
    st_.stop_id = opts.language_only ? model_->special.asr_text : -1;
    st_.itn = opts.itn;
    st_.abort = opts.abort;
    if ((opts.on_text || opts.on_text_tokens) && !opts.language_only)
        st_.deltas = std::make_shared<TextDeltas>(
            model_->tokenizer, model_->special.asr_text, !st_.forced.empty(),
            [text = opts.on_text, with_tokens = opts.on_text_tokens](const std::string& delta, const std::vector<TokenInfo>& t) {
                if (text) text(delta);
                if (with_tokens) with_tokens(delta, t);
            });
    st_.cap = d.max_new_tokens > 0 ? d.max_new_tokens : default_token_cap(r.audio_seconds);
    if (opts.on_progress) { // the steps expected: exactly the cap's with ignore_eos, a language tag's alone
        const int expected = d.ignore_eos          ? st_.cap
                             : opts.language_only ? PieceProgress::expected_tokens(0) // the tag and its markers
                                                   : std::min(st_.cap, PieceProgress::expected_tokens(r.audio_seconds));
        st_.progress = std::make_unique<PieceProgress>([f = opts.on_progress](double g) { f(float(g)); }, expected,
                                                       accel_ != nullptr);
    }
    check_abort();
    if (audio.size() < 400) {
        r.finish = FinishReason::Empty;
        r.language = st_.forced;
        st_.empty = true;
        return false;
    }
    rng_.seed(d.seed);
    // Greedy decoding on an accelerator: the argmax runs there, one step ahead of the host's stop checks, and the
    // encoder's rows stay on the device for the prefill (queued while the encoder runs: mel_ms and encode_ms are then
    // the times to queue them, and their remaining device time counts in prefill_ms; the sum is the wall time).
    const bool device_greedy = st_.device_greedy = accel_ && argmax_decoding(d);
    Stopwatch sw;
    Tensor rows;
    int64_t n_rows = 0;
    if (device_greedy) {
        n_rows = accel_->encode_audio_resident(audio, opts.min_samples, &r.timings.mel_ms);
        r.timings.encode_ms = sw.ms() - r.timings.mel_ms;
        stage_done(PieceProgress::Stage::Encoder);
    } else {
        rows = encode_samples(audio, opts.min_samples, r.timings);
        n_rows = rows.rows();
    }
    check_abort();
    Prompt p = prompt(n_rows, opts);
    r.n_prompt_tokens = int(p.ids.size());
    r.n_audio_tokens = int(p.n_audio);
    // The KV cache gets room for the prompt and the decoding ahead before the prefill, so that it does not grow
    // mid-decode (a growth copies every position and holds both caches at once: a 605 s piece of the 0.6B model on
    // the CPU peaked at 3.9 GB RSS with it, 2.5 GB without). A transcript takes fewer tokens than half the audio's
    // rows; a device's greedy loop needs room for the token cap (its captured step cannot move the cache).
    const int64_t cap = int64_t(st_.cap) + 1;
    model_->check_positions(int64_t(p.ids.size()), cap, opts.context, "the request");
    const int64_t ahead = d.ignore_eos || device_greedy ? cap : std::min<int64_t>(cap, opts.language_only ? 16 : p.n_audio / 2 + 64);
    const int64_t positions = int64_t(p.ids.size()) + ahead;
    if (accel_) {
        accel_->reserve_kv(positions);
    } else {
        check_kv_memory(positions, 1, "the prompt");
        decoder_.reserve(cache_, positions);
    }
    sw.reset();
    if (device_greedy) accel_->prefill_resident(p.ids, p.audio_begin);
    else st_.logits = prefill(p, rows);
    r.timings.prefill_ms = sw.ms();
    stage_done(PieceProgress::Stage::Prefill);
    check_abort();
    st_.sw.reset();
    st_.V = st_.logits.cols();
    st_.plain = d;
    if (d.ignore_eos) st_.plain.temperature = 0.0f;
    r.finish = FinishReason::TokenCap;
    return true;
}

int Session::next(const float* logits) {
    float lp = 0;
    const int tok = choose(logits, st_.V, st_.plain, lp);
    return next_chosen(tok, lp);
}

int Session::next_chosen(int tok, float lp) {
    check_abort();
    step_done();
    if (!accept(tok, lp, st_.d, st_.out, st_.run_len, st_.r)) return -1;
    return ++st_.n < st_.cap ? tok : -1;
}

int Session::begin_device_batch() {
    if (!st_.device_greedy) fail("session", "batched device decoding needs greedy decoding on a device");
    int id = 0;
    float lp = 0;
    accel_->batch_first(st_.cap, &id, &lp);
    return next_chosen(id, lp);
}

std::vector<DeviceSession*> Session::device_rows(Session* const* s, size_t B) {
    std::vector<DeviceSession*> rows(B);
    for (size_t b = 0; b < B; ++b) {
        if (!s[b]->accel_ || s[b]->model_ != s[0]->model_) fail("session", "a batched device step needs sessions of one device model");
        rows[b] = s[b]->accel_.get();
    }
    return rows;
}

void Session::step_batch_device(Session* const* s, const int* tokens, size_t B, DeviceBatch& batch, int* ids,
                                float* logprobs) {
    if (B == 0) return;
    for (size_t b = 0; b < B; ++b)
        if (!s[b]->st_.device_greedy) fail("session", "a batched device step needs greedy sessions of one device model");
    batch.step(device_rows(s, B).data(), tokens, B, ids, logprobs);
}

void Session::step_top_device(Session* const* s, const int* tokens, size_t B, DeviceBatch& batch, int k, int* ids,
                              float* logprobs) {
    if (B == 0) return;
    batch.step_top(device_rows(s, B).data(), tokens, B, k, ids, logprobs);
}

TranscriptionResult Session::finish() {
    st_.abort = nullptr; // the request is over (the session may serve a tool's stage calls next)
    st_.progress.reset();
    TranscriptionResult r = std::move(st_.r);
    if (st_.empty) return r;
    r.timings.decode_ms = st_.sw.ms();
    r.raw_text = model_->tokenizer.decode(st_.out, true);
    if (const auto deltas = std::move(st_.deltas)) deltas->finish(r.raw_text);
    if (st_.forced.empty()) r.language_probability = language_tag_probability(r.tokens, model_->special.asr_text);
    ParsedOutput parsed = parse_asr_output(r.raw_text, st_.forced);
    r.language = parsed.language;
    r.text = st_.itn ? postprocess_text(parsed.text, parsed.language) : parsed.text;
    r.rtf = r.timings.total_ms() / 1000.0 / r.audio_seconds;
    return r;
}

TranscriptionResult Session::run(const std::vector<float>& audio, const TranscribeOptions& opts) {
    if (!begin(audio, opts)) return finish();
    if (st_.device_greedy) {
        // an abort stops the device's loop the ordinary way (its step queued ahead finishes), then throws
        bool aborted = false;
        accel_->greedy(st_.cap, [&](int tok, float lp) {
            if (st_.abort && st_.abort()) return !(aborted = true);
            step_done();
            return accept(tok, lp, st_.d, st_.out, st_.run_len, st_.r);
        });
        if (aborted) cancelled();
    } else if (st_.d.beam_size > 1) {
        decode_beams();
    } else {
        for (int tok; (tok = next(st_.logits.ptr())) >= 0;) st_.logits = step(tok);
    }
    return finish();
}

Tensor Session::step_batch(Session* const* s, const int* tokens, size_t B) {
    if (B == 0) return Tensor();
    std::vector<KvCache*> caches(B);
    for (size_t b = 0; b < B; ++b) {
        if (s[b]->model_ != s[0]->model_ || s[b]->accel_)
            fail("session", "a batched decode step needs CPU sessions of one model");
        caches[b] = &s[b]->cache_;
    }
    const Decoder& dec = s[0]->decoder_;
    Tensor h = dec.forward_batch(dec.embed(std::vector<int>(tokens, tokens + B)), caches.data());
    return dec.logits_batch(h);
}

} // namespace qasr
