// The offline transcription pipeline with its guardrails: < 400 samples → empty result; token cap; EOS set;
// repetition stop (one id more than `repetition_limit` times in a row); --ignore-eos for fixed-length decoding.
#include "pipeline/session.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"
#include "text/output.hpp"
#include "text/postprocess.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace qasr {

int default_token_cap(double seconds) { return int(std::ceil(seconds * 20.0)) + 64; }

Session::Session(std::shared_ptr<const Model> model)
    : model_(std::move(model)), accel_(model_->device ? model_->device->open() : nullptr),
      decoder_(model_->weights.dec, model_->hp.text) {}

Tensor Session::mel(const std::vector<float>& audio, size_t min_samples) const {
    return model_->mel.compute(audio, min_samples);
}

Tensor Session::encode(const Tensor& mel, const TapFn* tap) const {
    if (accel_) {
        if (tap) fail("session", "tap points are only available on the CPU path");
        return accel_->encode(mel);
    }
    return encode_audio(model_->weights.enc, model_->hp.audio, mel, tap);
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
    Tensor h = decoder_.forward(std::move(x), cache_, tap);
    if (all_logits) return decoder_.logits(h);
    Tensor last({1, D});
    std::memcpy(last.ptr(), h.row(h.rows() - 1), size_t(D) * sizeof(float));
    return decoder_.logits(last);
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
    } else {
        r.tokens.push_back({tok, lp});
    }
    out.push_back(tok);
    return true;
}

TranscriptionResult Session::run(const std::vector<float>& audio, const TranscribeOptions& opts) {
    TranscriptionResult r;
    r.audio_seconds = double(audio.size()) / 16000.0;
    r.timings.load_ms = model_->load_ms;
    const DecodeOptions& d = opts.decode;
    if (d.max_new_tokens < 0) fail("options", "max_new_tokens must be ≥ 0");
    if (d.ignore_eos && d.max_new_tokens <= 0) fail("options", "ignore_eos needs an explicit max_new_tokens");
    if (!(d.temperature >= 0.0f && d.temperature <= 100.0f)) fail("options", "temperature must be in [0, 100]");
    if (!(d.top_p > 0.0f && d.top_p <= 1.0f)) fail("options", "top_p must be in (0, 1]");
    const std::string forced = opts.language.empty() ? "" : canonical_language(opts.language);
    if (audio.size() < 400) {
        r.finish = FinishReason::Empty;
        r.language = forced;
        return r;
    }
    rng_.seed(d.seed);
    // Greedy decoding on an accelerator: the argmax runs there, one step ahead of the host's stop checks, and the
    // encoder's rows stay on the device for the prefill (queued while the encoder runs: mel_ms and encode_ms are then
    // the times to queue them, and their remaining device time counts in prefill_ms; the sum is the wall time).
    const bool device_greedy = accel_ && (d.temperature <= 0.0f || d.ignore_eos);
    Stopwatch sw;
    Tensor rows;
    int64_t n_rows = 0;
    if (device_greedy) {
        n_rows = accel_->encode_audio_resident(audio, opts.min_samples, &r.timings.mel_ms);
        r.timings.encode_ms = sw.ms() - r.timings.mel_ms;
    } else if (accel_) { // log-mel and encoder on the device
        rows = accel_->encode_audio(audio, opts.min_samples, &r.timings.mel_ms);
        r.timings.encode_ms = sw.ms() - r.timings.mel_ms;
        n_rows = rows.rows();
    } else {
        Tensor m = mel(audio, opts.min_samples);
        r.timings.mel_ms = sw.ms();
        sw.reset();
        rows = encode(m);
        r.timings.encode_ms = sw.ms();
        n_rows = rows.rows();
    }
    Prompt p = prompt(n_rows, opts);
    r.n_prompt_tokens = int(p.ids.size());
    r.n_audio_tokens = int(p.n_audio);
    sw.reset();
    Tensor logits;
    if (device_greedy) accel_->prefill_resident(p.ids, p.audio_begin);
    else logits = prefill(p, rows);
    r.timings.prefill_ms = sw.ms();
    sw.reset();
    const int cap = d.max_new_tokens > 0 ? d.max_new_tokens : default_token_cap(r.audio_seconds);
    std::vector<int> out;
    int run_len = 0;
    r.finish = FinishReason::TokenCap;
    if (device_greedy) {
        accel_->greedy(cap, [&](int tok, float lp) { return accept(tok, lp, d, out, run_len, r); });
    } else {
        const int64_t V = logits.cols();
        DecodeOptions greedy_plain = d;
        if (d.ignore_eos) greedy_plain.temperature = 0.0f;
        for (int n = 0; n < cap; ++n) {
            float lp = 0;
            const int tok = choose(logits.ptr(), V, greedy_plain, lp);
            if (!accept(tok, lp, d, out, run_len, r)) break;
            if (n + 1 < cap) logits = step(tok);
        }
    }
    r.timings.decode_ms = sw.ms();
    r.raw_text = model_->tokenizer.decode(out, true);
    ParsedOutput parsed = parse_asr_output(r.raw_text, forced);
    r.language = parsed.language;
    r.text = opts.itn ? postprocess_text(parsed.text, parsed.language) : parsed.text;
    r.rtf = r.timings.total_ms() / 1000.0 / r.audio_seconds;
    return r;
}

} // namespace qasr
