// Streaming transcription (see stream.hpp for the policy). Shapes: logmel_ is frame-major [frames][n_mels];
// windows_[w] are the projector rows [≤13·8, D] of completed 800-frame windows.
#include "pipeline/stream.hpp"

#include "audio/audio.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "model/encoder.hpp"
#include "text/output.hpp"
#include "text/postprocess.hpp"
#include "text/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace qasr {
namespace {

constexpr size_t kHop = 160;
constexpr size_t kMinSamples = 8000;

size_t stable_frame_count(size_t n_samples) { // frames whose STFT support lies inside the samples seen
    return n_samples >= 200 ? (n_samples - 200) / kHop + 1 : 0;
}

int argmax(const float* x, int64_t n) { return int(std::max_element(x, x + n) - x); }

} // namespace

int StreamSession::emulated_length(double seconds) const {
    return int(std::ceil(opts_.emulate_tokens_per_second * seconds)) + 4;
}

namespace {

} // namespace

StreamSession::StreamSession(std::shared_ptr<const Model> model, StreamOptions opts, Callback cb)
    : model_(std::move(model)), opts_(std::move(opts)), cb_(std::move(cb)), decoder_(model_->weights.dec, model_->hp.text) {
    if (!(opts_.chunk_seconds >= 0.1 && opts_.chunk_seconds <= 60)) fail("options", "chunk_seconds must be in [0.1, 60]");
    if (opts_.rollback_tokens < 0 || opts_.rollback_tokens > 1000) fail("options", "rollback_tokens must be in [0, 1000]");
    if (opts_.unfixed_chunks < 0) fail("options", "unfixed_chunks must be ≥ 0");
    if (opts_.max_segment_windows < 1 || opts_.max_segment_windows > 1000)
        fail("options", "max_segment_windows must be in [1, 1000]");
    forced_ = opts_.language.empty() ? "" : canonical_language(opts_.language);
    chunk_samples_ = size_t(std::lround(opts_.chunk_seconds * kSampleRate));
    next_step_at_ = chunk_samples_;
}

void StreamSession::push_s16le(const uint8_t* bytes, size_t n) {
    if (n % 2) fail("stream", "s16le input must have an even number of bytes");
    std::vector<float> f = pcm_s16le_to_float(bytes, n);
    push(f.data(), f.size());
}

void StreamSession::push(const float* pcm, size_t n) {
    if (finished_) fail("stream", "push after finish()");
    if (!pcm && n) fail("stream", "null sample pointer");
    for (size_t i = 0; i < n; ++i)
        if (!std::isfinite(pcm[i])) fail("stream", "samples must be finite");
    size_t done = 0;
    while (done < n) { // append up to the next step boundary, so steps run at fixed sample counts
        const size_t take = std::min(n - done, next_step_at_ - audio_.size());
        for (size_t i = 0; i < take; ++i) audio_.push_back(std::clamp(pcm[done + i], -1.0f, 1.0f));
        done += take;
        if (audio_.size() == next_step_at_) {
            step(false);
            next_step_at_ += chunk_samples_;
            const size_t boundary = size_t(opts_.max_segment_windows) * size_t(model_->hp.audio.n_window_infer) * kHop;
            if (audio_.size() >= boundary + 200) end_segment(boundary);
        }
    }
}

std::vector<int> StreamSession::rollback_prefix(bool final) const {
    if (chunk_index_ < opts_.unfixed_chunks || hyp_.empty() || (final && opts_.exact_final)) return {};
    size_t keep = hyp_.size() > size_t(opts_.rollback_tokens) ? hyp_.size() - size_t(opts_.rollback_tokens) : 0;
    if (final) keep = std::max<size_t>(keep, 1);
    std::vector<int> p(hyp_.begin(), hyp_.begin() + long(keep));
    while (!p.empty() && model_->tokenizer.decode(p).find("\xEF\xBF\xBD") != std::string::npos) p.pop_back();
    return p;
}

void StreamSession::step(bool final) {
    Stopwatch sw;
    StreamChunkStats st;
    const AudioHParams& ahp = model_->hp.audio;
    const int n_mels = ahp.n_mels;
    const size_t FW = size_t(ahp.n_window_infer);
    const size_t N = final ? std::max(audio_.size(), kMinSamples) : audio_.size();
    st.audio_seconds = consumed_seconds_ + double(audio_.size()) / kSampleRate;
    const size_t T = N / kHop;
    // 1. Log-mel: keep stable frames, recompute the rest.
    const size_t now_stable = final ? T : std::min(T, stable_frame_count(N));
    logmel_.resize(stable_frames_ * size_t(n_mels));
    std::vector<float> fresh = model_->mel.log10_frames(audio_, N, stable_frames_, T); // [n_mels, T - stable]
    const size_t nf = T - stable_frames_;
    st.mel_frames = int(nf);
    std::vector<float> tail_frames; // frame-major provisional frames
    for (size_t t = 0; t < nf; ++t) {
        std::vector<float>& dst = (stable_frames_ + t < now_stable) ? logmel_ : tail_frames;
        for (int m = 0; m < n_mels; ++m) dst.push_back(fresh[size_t(m) * nf + t]);
        if (stable_frames_ + t < now_stable)
            for (int m = 0; m < n_mels; ++m) max_stable_ = std::max(max_stable_, fresh[size_t(m) * nf + t]);
    }
    stable_frames_ = now_stable;
    float clip_max = max_stable_;
    for (float v : tail_frames) clip_max = std::max(clip_max, v);
    const float floor = clip_max - 8.0f;
    auto frame = [&](size_t t) -> const float* {
        return t < stable_frames_ ? &logmel_[t * size_t(n_mels)] : &tail_frames[(t - stable_frames_) * size_t(n_mels)];
    };
    auto encode_frames = [&](size_t t0, size_t t1) {
        std::vector<float> lm(size_t(n_mels) * (t1 - t0));
        for (size_t t = t0; t < t1; ++t)
            for (int m = 0; m < n_mels; ++m) lm[size_t(m) * (t1 - t0) + (t - t0)] = frame(t)[m];
        st.encoder_windows += 1;
        st.encoder_frames += int(t1 - t0);
        return encode_audio(model_->weights.enc, ahp, MelFrontend::normalize(lm, n_mels, t1 - t0, clip_max));
    };
    // 2. Encoder: completed windows are reused unless the clamp floor changed one of their values.
    size_t valid_rows = 0, first_changed = windows_.size();
    for (size_t w = 0; w < windows_.size(); ++w) {
        const bool unchanged = floor == floor_used_ || (floor <= window_min_[w] && floor_used_ <= window_min_[w]);
        if (!unchanged && first_changed == windows_.size()) first_changed = w;
        if (!unchanged) windows_[w] = encode_frames(w * FW, (w + 1) * FW);
    }
    for (size_t w = 0; w < first_changed; ++w) valid_rows += size_t(windows_[w].rows());
    while ((windows_.size() + 1) * FW <= stable_frames_ && (windows_.size() + 1) * FW <= T) {
        const size_t w = windows_.size();
        float mn = 1e30f;
        for (size_t t = w * FW; t < (w + 1) * FW; ++t)
            for (int m = 0; m < n_mels; ++m) mn = std::min(mn, frame(t)[m]);
        windows_.push_back(encode_frames(w * FW, (w + 1) * FW));
        window_min_.push_back(mn);
    }
    floor_used_ = floor;
    const size_t tail0 = windows_.size() * FW;
    Tensor tail = tail0 < T ? encode_frames(tail0, T) : Tensor({0, int64_t(ahp.output_dim)});
    int64_t A = tail.rows();
    for (const auto& w : windows_) A += w.rows();
    const int64_t D = model_->hp.text.hidden;
    Tensor rows({A, D});
    int64_t r = 0;
    auto append = [&](const Tensor& t) {
        if (t.size()) std::memcpy(rows.ptr() + r * D, t.ptr(), t.size() * sizeof(float));
        r += t.rows();
    };
    for (const auto& w : windows_) append(w);
    append(tail);
    // 3. Decoder: reuse the KV rows whose inputs did not change, prefill the rest, then generate.
    const Prompt p = build_prompt(model_->tokenizer, model_->special, A, opts_.context, forced_);
    const std::vector<int> prefix = rollback_prefix(final);
    std::vector<int> ids = p.ids;
    ids.insert(ids.end(), prefix.begin(), prefix.end());
    size_t reuse = 0;
    while (reuse < ids.size() && reuse < cached_ids_.size() && ids[reuse] == cached_ids_[reuse]) ++reuse;
    reuse = std::min(reuse, size_t(p.audio_begin) + std::min(valid_rows, cached_audio_rows_));
    reuse = std::min(reuse, ids.size() - 1); // always run at least the last position for its logits
    cache_.truncate(int64_t(reuse), int64_t(model_->hp.text.n_kv_heads) * model_->hp.text.head_dim);
    if (cache_.k.empty()) cache_.reset(model_->weights.dec.layers.size());
    std::vector<int> run_ids(ids.begin() + long(reuse), ids.end());
    Tensor x = decoder_.embed(run_ids);
    for (size_t i = reuse; i < ids.size(); ++i) {
        const int64_t a = int64_t(i) - p.audio_begin;
        if (a >= 0 && a < A) std::memcpy(x.row(int64_t(i - reuse)), rows.row(a), size_t(D) * sizeof(float));
    }
    st.prefilled_tokens = int(run_ids.size());
    Tensor h = decoder_.forward(std::move(x), cache_);
    Tensor last({1, D});
    std::memcpy(last.ptr(), h.row(h.rows() - 1), size_t(D) * sizeof(float));
    Tensor logits = decoder_.logits(last);
    const double seg_seconds = double(N) / kSampleRate;
    int cap = final ? std::max(8, int(std::ceil(seg_seconds * 20.0)) + 64 - int(prefix.size()))
                    : (opts_.max_new_tokens_per_chunk > 0 ? opts_.max_new_tokens_per_chunk
                                                         : int(std::ceil(opts_.chunk_seconds * 20.0)) + 32);
    if (opts_.emulate_tokens_per_second > 0) // transcript length of a real model, for random-weight benchmarks
        cap = std::max(0, emulated_length(seg_seconds) - int(prefix.size()));
    std::vector<int> gen;
    int run_len = 0;
    for (int n = 0; n < cap; ++n) {
        const int tok = argmax(logits.ptr(), logits.cols());
        if (model_->is_eos(tok)) break;
        run_len = (!gen.empty() && gen.back() == tok) ? run_len + 1 : 1;
        if (run_len > DecodeOptions{}.repetition_limit) break; // the offline guard's default
        gen.push_back(tok);
        logits = decoder_.logits(decoder_.forward(decoder_.embed({tok}), cache_));
    }
    st.generated_tokens = int(gen.size());
    cached_ids_ = ids;
    cached_ids_.insert(cached_ids_.end(), gen.begin(), gen.end());
    cached_ids_.resize(size_t(cache_.len)); // the last generated token has not been fed back
    cached_audio_rows_ = A - tail.rows();
    hyp_ = prefix;
    hyp_.insert(hyp_.end(), gen.begin(), gen.end());
    ++chunk_index_;
    // 4. Events.
    const ParsedOutput full = parse_asr_output(model_->tokenizer.decode(hyp_), forced_);
    const ParsedOutput pre = parse_asr_output(model_->tokenizer.decode(prefix), forced_);
    if (!full.language.empty()) language_ = full.language;
    std::string stable = full.text.rfind(pre.text, 0) == 0 ? pre.text : "";
    st.ms = sw.ms();
    stats_.push_back(st);
    if (!final) emit(StreamEvent::Kind::Partial, committed_raw_text_ + stable, full.text.substr(stable.size()));
}

void StreamSession::end_segment(size_t boundary) {
    std::vector<float> rest(audio_.begin() + long(boundary), audio_.end());
    audio_.resize(boundary);
    // Frames (and windows) that saw samples past the boundary are provisional again: at the segment end the
    // STFT reflects, exactly as for a clip that ends there.
    const int n_mels = model_->hp.audio.n_mels;
    const size_t FW = size_t(model_->hp.audio.n_window_infer);
    stable_frames_ = std::min(stable_frames_, stable_frame_count(boundary));
    logmel_.resize(stable_frames_ * size_t(n_mels));
    max_stable_ = logmel_.empty() ? -1e30f : *std::max_element(logmel_.begin(), logmel_.end());
    while (!windows_.empty() && windows_.size() * FW > stable_frames_) {
        windows_.pop_back();
        window_min_.pop_back();
    }
    step(true);
    const ParsedOutput seg = parse_asr_output(model_->tokenizer.decode(hyp_), forced_);
    committed_raw_text_ += seg.text;
    consumed_seconds_ += double(boundary) / kSampleRate;
    emit(StreamEvent::Kind::Final, opts_.itn ? postprocess_text(committed_raw_text_, language_) : committed_raw_text_, "");
    // Fresh segment state.
    audio_.clear();
    chunk_index_ = 0;
    logmel_.clear();
    stable_frames_ = 0;
    max_stable_ = -1e30f;
    windows_.clear();
    window_min_.clear();
    floor_used_ = -1e30f;
    cache_ = KvCache();
    cached_ids_.clear();
    cached_audio_rows_ = 0;
    hyp_.clear();
    next_step_at_ = chunk_samples_;
    if (!rest.empty()) push(rest.data(), rest.size());
}

void StreamSession::emit(StreamEvent::Kind kind, const std::string& stable, const std::string& unstable) {
    StreamEvent e{kind, stable, unstable, forced_.empty() ? language_ : forced_,
                  consumed_seconds_ + double(audio_.size()) / kSampleRate};
    pending_.push_back(e);
    if (cb_) cb_(e);
}

std::vector<StreamEvent> StreamSession::poll() {
    std::vector<StreamEvent> out;
    out.swap(pending_);
    return out;
}

TranscriptionResult StreamSession::finish() {
    if (finished_) return final_;
    finished_ = true;
    Stopwatch sw;
    if (audio_.size() >= 400) {
        step(true);
        committed_raw_text_ += parse_asr_output(model_->tokenizer.decode(hyp_), forced_).text;
    }
    consumed_seconds_ += double(audio_.size()) / kSampleRate;
    audio_.clear();
    final_.language = forced_.empty() ? language_ : forced_;
    final_.text = opts_.itn ? postprocess_text(committed_raw_text_, final_.language) : committed_raw_text_;
    final_.raw_text = committed_raw_text_;
    final_.audio_seconds = consumed_seconds_;
    final_.finish = committed_raw_text_.empty() ? FinishReason::Empty : FinishReason::Eos;
    final_.timings.decode_ms = sw.ms();
    emit(StreamEvent::Kind::Final, final_.text, "");
    return final_;
}

} // namespace qasr
