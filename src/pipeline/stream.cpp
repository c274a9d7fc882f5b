// Streaming transcription (see stream.hpp for the policy). Shapes: logmel_ is frame-major [frames][n_mels];
// windows_[w] are the projector rows [≤13·8, D] of completed 800-frame windows; stem_[k] the conv-stem rows
// [13, d_model] of the open window's k-th completed 100-frame chunk.
#include "pipeline/stream.hpp"
#include "pipeline/stream_engine.hpp"

#include "audio/audio.hpp"
#include "core/error.hpp"
#include "core/timer.hpp"
#include "model/encoder.hpp"
#include "ops/ops.hpp"
#include "pipeline/segments.hpp"
#include "text/output.hpp"
#include "text/postprocess.hpp"
#include "text/utf8.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace qasr {
namespace {

constexpr size_t kHop = 160;
constexpr size_t kMinSamples = 8000;
constexpr size_t kPauseBlock = 1600;      // pause detection granularity (100 ms of segment samples)
constexpr float kQuietRatio = 0.0316f;    // quiet: block RMS at least 30 dB under the loudest block so far
constexpr float kQuietFloor = 3e-4f;      // … or under −70 dBFS

size_t stable_frame_count(size_t n_samples) { // frames whose STFT support lies inside the samples seen
    return n_samples >= 200 ? (n_samples - 200) / kHop + 1 : 0;
}

int argmax(const float* x, int64_t n) { return int(std::max_element(x, x + n) - x); }

constexpr int kLookupMax = 8; // lookup draft tokens verified with a sequential pass (a pass of 9 rows)

// Prompt-lookup draft of what may follow `gen` (at most max_len tokens), or none:
//  (a) the previous hypothesis `old`, after the latest occurrence of gen's last 3, 2 or 1 tokens (a new hypothesis
//      that left the old one often joins it again, e.g. after one changed word);
//  (b) gen itself: its last token again when it just repeated, else after an earlier occurrence of its last two
//      tokens, continued with that period (a repetition).
// Only a guess: the tokens are kept where greedy argmax reproduces them, so the result is unchanged.
std::vector<int> lookup_draft(const std::vector<int>& old, const std::vector<int>& gen, size_t max_len) {
    if (gen.empty() || max_len == 0) return {};
    for (size_t n = std::min<size_t>(3, gen.size()); n >= 1; --n)
        for (size_t e = old.size(); e-- > n;) // occurrence old[e − n, e), continuation from old[e]
            if (std::equal(old.begin() + long(e - n), old.begin() + long(e), gen.end() - long(n)))
                return {old.begin() + long(e), old.begin() + long(std::min(old.size(), e + max_len))};
    const size_t g = gen.size();
    if (g >= 2 && gen[g - 1] == gen[g - 2]) return std::vector<int>(max_len, gen[g - 1]); // a token repeating
    for (size_t e = g - 1; g >= 3 && e >= 2; --e) // gen[e − 2, e) == gen[g − 2, g), period g − e
        if (gen[e - 2] == gen[g - 2] && gen[e - 1] == gen[g - 1]) {
            std::vector<int> d;
            for (size_t i = 0; i < max_len; ++i) d.push_back(i < g - e ? gen[e + i] : d[i - (g - e)]);
            return d;
        }
    return {};
}

} // namespace

int StreamSession::emulated_length(double seconds) const {
    return int(std::ceil(opts_.emulate_tokens_per_second * seconds)) + 4;
}

StreamSession::StreamSession(std::shared_ptr<const Model> model, StreamOptions opts, Callback cb)
    : model_(std::move(model)), opts_(std::move(opts)), cb_(std::move(cb)), engine_(make_stream_engine(model_)) {
    if (!(opts_.chunk_seconds >= 0.1 && opts_.chunk_seconds <= 60)) fail("options", "chunk_seconds must be in [0.1, 60]");
    if (opts_.rollback_tokens < 0 || opts_.rollback_tokens > 1000) fail("options", "rollback_tokens must be in [0, 1000]");
    if (opts_.unfixed_chunks < 0) fail("options", "unfixed_chunks must be ≥ 0");
    if (opts_.max_segment_windows < 1 || opts_.max_segment_windows > 1000)
        fail("options", "max_segment_windows must be in [1, 1000]");
    forced_ = opts_.language.empty() ? "" : canonical_language(opts_.language);
    if (!(opts_.pause_seconds == 0 || (opts_.pause_seconds >= 0.1 && opts_.pause_seconds <= 60)))
        fail("options", "pause_seconds must be 0 (off) or in [0.1, 60]");
    { // the longest segment's prompt and final token cap must fit the decoder's positions (a huge context would not)
        const AudioHParams& ahp = model_->hp.audio;
        const int64_t frames = int64_t(opts_.max_segment_windows) * ahp.n_window_infer;
        const Prompt p = build_prompt(model_->tokenizer, model_->special, encoder_window_rows(frames, ahp), opts_.context,
                                      forced_);
        const double seconds = double(frames) * double(kHop) / double(kSampleRate);
        model_->check_positions(int64_t(p.ids.size()), int64_t(std::ceil(seconds * 20.0)) + 65, opts_.context,
                                "the stream (segments of up to max_segment_windows × 8 s)");
    }
    chunk_samples_ = size_t(std::lround(opts_.chunk_seconds * kSampleRate));
    pause_blocks_ = int(std::lround(opts_.pause_seconds * kSampleRate / double(kPauseBlock)));
    next_step_at_ = chunk_samples_;
    plan_early_stem();
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
    while (done < n) { // append up to the next step or pause check, so both happen at fixed sample counts
        size_t next = std::min(next_step_at_, next_check_at_);
        if (next_stem_at_ > audio_.size()) next = std::min(next, next_stem_at_);
        const size_t take = std::min(n - done, next - audio_.size());
        for (size_t i = 0; i < take; ++i) audio_.push_back(std::clamp(pcm[done + i], -1.0f, 1.0f));
        done += take;
        bool stepped = false;
        if (audio_.size() == next_check_at_) {
            stepped = check_pause();
            next_check_at_ += kPauseBlock;
        }
        if (audio_.size() == next_stem_at_ && audio_.size() != next_step_at_ && !stepped && !interrupted()) early_stem();
        if (audio_.size() == next_step_at_) {
            // a pause step at the same sample count already covers this chunk; after interrupt() none runs
            if (!stepped && !interrupted()) step(false);
            next_step_at_ += chunk_samples_;
            const size_t boundary = size_t(opts_.max_segment_windows) * size_t(model_->hp.audio.n_window_infer) * kHop;
            if (audio_.size() >= boundary + 200) end_segment(boundary);
        }
    }
}

Tensor StreamSession::stem_of(const std::vector<float>& lm, size_t frames, float clip_max) const {
    const AudioHParams& ahp = model_->hp.audio;
    const Tensor in = MelFrontend::normalize(lm, ahp.n_mels, frames, clip_max);
    return engine_->stem(in);
}

void StreamSession::plan_early_stem() {
    // The next chunk to keep ends at frame c1; its last frame is final once the samples cover its STFT support.
    const size_t cf = size_t(model_->hp.audio.chunk_frames());
    const size_t c1 = stem_from_ + (stem_.size() + 1) * cf;
    next_stem_at_ = std::max((c1 - 1) * kHop + 200, audio_.size() + 1);
}

void StreamSession::early_stem() {
    // Between steps: the log-mel of the frames that became final (the next step recomputes only the frames after
    // them) and the conv stem of every chunk whose frames are now all final, with the clamp floor of the final
    // frames so far. A step checks each kept chunk against its own floor (exact, as for the step's own chunks).
    Stopwatch sw;
    const int n_mels = model_->hp.audio.n_mels;
    const size_t cf = size_t(model_->hp.audio.chunk_frames());
    const size_t now_stable = stable_frame_count(audio_.size());
    if (now_stable > stable_frames_) {
        const std::vector<float> fresh = model_->mel.log10_frames(audio_, audio_.size(), stable_frames_, now_stable);
        const size_t nf = now_stable - stable_frames_;
        logmel_.resize(stable_frames_ * size_t(n_mels));
        for (size_t t = 0; t < nf; ++t)
            for (int m = 0; m < n_mels; ++m) {
                logmel_.push_back(fresh[size_t(m) * nf + t]);
                max_stable_ = std::max(max_stable_, fresh[size_t(m) * nf + t]);
            }
        stable_frames_ = now_stable;
    }
    for (;;) {
        const size_t c0 = stem_from_ + stem_.size() * cf;
        if (c0 + cf > stable_frames_) break;
        std::vector<float> lm(size_t(n_mels) * cf);
        float mn = 1e30f;
        for (size_t t = 0; t < cf; ++t)
            for (int m = 0; m < n_mels; ++m) {
                const float v = logmel_[(c0 + t) * size_t(n_mels) + size_t(m)];
                lm[size_t(m) * cf + t] = v;
                mn = std::min(mn, v);
            }
        stem_.push_back(stem_of(lm, cf, max_stable_));
        stem_min_.push_back(mn);
        stem_floor_.push_back(max_stable_ - 8.0f);
        ++early_chunks_;
    }
    early_ms_ += sw.ms();
    plan_early_stem();
}

bool StreamSession::check_pause() {
    double e = 0;
    for (size_t i = audio_.size() - kPauseBlock; i < audio_.size(); ++i) e += double(audio_[i]) * audio_[i];
    const float rms = float(std::sqrt(e / double(kPauseBlock)));
    peak_rms_ = std::max(peak_rms_, rms);
    if (rms > std::max(kQuietRatio * peak_rms_, kQuietFloor)) {
        quiet_blocks_ = 0;
        speech_since_pause_ = true;
        endpoint_ok_ = false;
        heard_speech_ = true;
        quiet_run_ = 0;
        return false;
    }
    if (heard_speech_) ++quiet_run_;
    if (pause_blocks_ == 0 || ++quiet_blocks_ != pause_blocks_ || !speech_since_pause_ || audio_.size() < kMinSamples)
        return false;
    if (interrupted()) return false; // finish() comes next and decodes everything anyway
    // A pause after speech: decode everything so far as the final would (no text prefix, previous hypothesis as
    // the draft), so that at release the final step finds a complete draft.
    step(false, true);
    speech_since_pause_ = false;
    if (stats_.back().interrupted) return true; // its hypothesis is not the whole audio: no endpoint
    endpoint_ok_ = true;
    endpoint_hyp_ = hyp_;
    endpoint_ending_ = ending_;
    return true;
}

std::vector<int> StreamSession::rollback_prefix(bool final) const {
    // The final decodes without a text prefix (as offline); with `speculative` the previous hypothesis is then
    // verified as a draft instead of being forced, so this costs no extra sequential steps.
    if (chunk_index_ < opts_.unfixed_chunks || hyp_.empty() || (final && (opts_.exact_final || opts_.speculative)))
        return {};
    size_t keep = hyp_.size() > size_t(opts_.rollback_tokens) ? hyp_.size() - size_t(opts_.rollback_tokens) : 0;
    if (final) keep = std::max<size_t>(keep, 1);
    // never fewer than the last step forced: a step that generated fewer ids than the rollback would otherwise hand
    // back text the partials called stable (found by the stream fuzz target)
    keep = std::max(keep, std::min(prefix_len_, hyp_.size()));
    std::vector<int> p(hyp_.begin(), hyp_.begin() + long(keep));
    while (!p.empty() && model_->tokenizer.decode(p).find("\xEF\xBF\xBD") != std::string::npos) p.pop_back();
    return p;
}

void StreamSession::step(bool final, bool pause) {
    Stopwatch sw, phase;
    StreamChunkStats st;
    st.pause = pause;
    const std::function<bool()> stop = [this, final] { return !final && interrupted(); }; // interrupt()
    const std::function<bool()> never;
    const bool full_decode = final || pause; // no text prefix, the final's token cap
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
    st.mel_ms = phase.ms();
    phase.reset();
    float clip_max = max_stable_;
    for (float v : tail_frames) clip_max = std::max(clip_max, v);
    const float floor = clip_max - 8.0f;
    auto frame = [&](size_t t) -> const float* {
        return t < stable_frames_ ? &logmel_[t * size_t(n_mels)] : &tail_frames[(t - stable_frames_) * size_t(n_mels)];
    };
    const size_t cf = size_t(ahp.chunk_frames());
    auto min_of = [&](size_t t0, size_t t1) {
        float mn = 1e30f;
        for (size_t t = t0; t < t1; ++t)
            for (int m = 0; m < n_mels; ++m) mn = std::min(mn, frame(t)[m]);
        return mn;
    };
    // Rows computed with floor f are exact under `floor` when no value lies under either floor alone.
    auto unchanged_from = [&](float mn, float f) { return floor == f || (floor <= mn && f <= mn); };
    auto unchanged = [&](float mn) { return unchanged_from(mn, floor_used_); };
    auto stem = [&](size_t t0, size_t t1) { // conv-stem rows of the chunk [t0, t1)
        std::vector<float> lm(size_t(n_mels) * (t1 - t0));
        for (size_t t = t0; t < t1; ++t)
            for (int m = 0; m < n_mels; ++m) lm[size_t(m) * (t1 - t0) + (t - t0)] = frame(t)[m];
        st.stem_chunks += 1;
        return stem_of(lm, t1 - t0, clip_max);
    };
    // Encoder rows of the window [t0, t1): each chunk's stem rows (from stem_ for chunks from stem_from_ on, which
    // also keeps new completed chunks), then the Transformer layers over all of them.
    auto encode_window = [&](size_t t0, size_t t1, const std::function<bool()>& until) {
        const bool cached = t0 >= stem_from_;
        const int64_t d = ahp.d_model;
        Tensor x({audio_token_count(int64_t(t1 - t0), ahp), d});
        int64_t row = 0;
        for (size_t c0 = t0, k = cached ? (t0 - stem_from_) / cf : 0; c0 < t1; c0 += cf, ++k) {
            const size_t c1 = std::min(c0 + cf, t1);
            Tensor own;
            if (!(cached && k < stem_.size())) {
                own = stem(c0, c1);
                if (cached && k == stem_.size() && c1 - c0 == cf && c1 <= stable_frames_) { // final frames only
                    stem_.push_back(own);
                    stem_min_.push_back(min_of(c0, c1));
                    stem_floor_.push_back(floor);
                }
            }
            const Tensor& r = own.size() ? own : stem_[k];
            std::memcpy(x.ptr() + row * d, r.ptr(), r.size() * sizeof(float));
            row += r.rows();
        }
        st.encoder_windows += 1;
        st.encoder_frames += int(t1 - t0);
        return engine_->encode_rows(std::move(x), encoder_window_rows(int64_t(t1 - t0), ahp), until);
    };
    // 2. Encoder: completed windows are reused unless the clamp floor changed one of their values; so are the stem
    //    rows of the open window's completed chunks.
    if (stem_from_ != windows_.size() * FW) {
        stem_.clear();
        stem_min_.clear();
        stem_floor_.clear();
        stem_from_ = windows_.size() * FW;
    }
    size_t valid_rows = 0, first_changed = windows_.size();
    for (size_t w = 0; w < windows_.size(); ++w) {
        const bool same = unchanged(window_min_[w]);
        if (!same && first_changed == windows_.size()) first_changed = w;
        if (!same) windows_[w] = encode_window(w * FW, (w + 1) * FW, never);
    }
    for (size_t w = 0; w < first_changed; ++w) valid_rows += size_t(windows_[w].rows());
    while (!stem_.empty() && stem_from_ + stem_.size() * cf > stable_frames_) { // frames provisional again
        stem_.pop_back();
        stem_min_.pop_back();
        stem_floor_.pop_back();
    }
    for (size_t k = 0; k < stem_.size(); ++k) {
        if (!unchanged_from(stem_min_[k], stem_floor_[k])) stem_[k] = stem(stem_from_ + k * cf, stem_from_ + (k + 1) * cf);
        stem_floor_[k] = floor;
    }
    while ((windows_.size() + 1) * FW <= stable_frames_ && (windows_.size() + 1) * FW <= T) {
        const size_t w = windows_.size();
        windows_.push_back(encode_window(w * FW, (w + 1) * FW, never));
        window_min_.push_back(min_of(w * FW, (w + 1) * FW));
        const long drop = long(std::min(stem_.size(), FW / cf)); // the window's chunks; later ones stay
        stem_.erase(stem_.begin(), stem_.begin() + drop);
        stem_min_.erase(stem_min_.begin(), stem_min_.begin() + drop);
        stem_floor_.erase(stem_floor_.begin(), stem_floor_.begin() + drop);
        stem_from_ = (w + 1) * FW;
    }
    floor_used_ = floor;
    // interrupt(): the caches above are exact; the decoder's cache keeps no rows of windows re-encoded here
    auto abandon = [&] {
        cached_audio_rows_ = std::min(cached_audio_rows_, valid_rows);
        st.interrupted = true;
        st.ms = sw.ms();
        stats_.push_back(st);
    };
    const size_t tail0 = windows_.size() * FW;
    Tensor tail = tail0 < T ? encode_window(tail0, T, stop) : Tensor({0, int64_t(ahp.output_dim)});
    if (tail0 < T && tail.rows() == 0) return abandon(); // stopped between the open window's encoder layers
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
    st.encoder_ms = phase.ms();
    phase.reset();
    if (stop()) return abandon();
    // 3. Decoder: reuse the KV rows whose inputs did not change, prefill the rest together with the draft (the
    //    previous hypothesis after the prefix), accept the draft's longest prefix that greedy argmax reproduces,
    //    then decode the rest one token at a time.
    const Prompt p = build_prompt(model_->tokenizer, model_->special, A, opts_.context, forced_);
    const std::vector<int> prefix = rollback_prefix(full_decode);
    std::vector<int> ids = p.ids;
    ids.insert(ids.end(), prefix.begin(), prefix.end());
    const size_t P = ids.size();
    const double seg_seconds = double(N) / kSampleRate;
    int cap = full_decode ? std::max(8, int(std::ceil(seg_seconds * 20.0)) + 64 - int(prefix.size()))
                          : (opts_.max_new_tokens_per_chunk > 0 ? opts_.max_new_tokens_per_chunk
                                                               : int(std::ceil(opts_.chunk_seconds * 20.0)) + 32);
    if (opts_.emulate_tokens_per_second > 0) // transcript length of a real model, for random-weight benchmarks
        cap = std::max(0, emulated_length(seg_seconds) - int(prefix.size()));
    std::vector<int> draft;
    if (opts_.speculative && !(final && opts_.exact_final) && hyp_.size() > prefix.size())
        draft.assign(hyp_.begin() + long(prefix.size()),
                     hyp_.begin() + long(std::min(hyp_.size(), prefix.size() + size_t(std::max(cap - 1, 0)))));
    // Only the draft tokens the decode loop below can accept: it stops at an EOS and at the repetition limit, so
    // the rows of later draft tokens would never be read. `last`, `run`: the generated token before the draft and
    // its run length (none for the prefill's draft).
    auto trim = [&](std::vector<int>& d, int last, int run) {
        size_t k = 0;
        for (; k < d.size(); ++k) {
            if (model_->is_eos(d[k])) break;
            run = d[k] == last ? run + 1 : 1;
            if (run > DecodeOptions{}.repetition_limit) break;
            last = d[k];
        }
        d.resize(k);
    };
    trim(draft, -1, 0);
    std::vector<int> all = ids;
    all.insert(all.end(), draft.begin(), draft.end());
    size_t reuse = 0;
    while (reuse < all.size() && reuse < cached_ids_.size() && all[reuse] == cached_ids_[reuse]) ++reuse;
    reuse = std::min(reuse, size_t(p.audio_begin) + std::min(valid_rows, cached_audio_rows_));
    reuse = std::min(reuse, P - 1); // always run the last prompt position for its logits
    engine_->truncate(int64_t(reuse));
    std::vector<int> run_ids(all.begin() + long(reuse), all.end());
    Tensor x = engine_->embed(run_ids);
    for (size_t i = reuse; i < all.size(); ++i) {
        const int64_t a = int64_t(i) - p.audio_begin;
        if (a >= 0 && a < A) std::memcpy(x.row(int64_t(i - reuse)), rows.row(a), size_t(D) * sizeof(float));
    }
    st.prefilled_tokens = int(run_ids.size());
    st.draft_tokens = int(draft.size());
    const int64_t fed = x.rows();
    if (!engine_->forward(std::move(x), stop)) { // interrupted between layers: the cache is back at `reuse`
        cached_ids_.resize(reuse);
        st.prefilled_tokens = st.draft_tokens = 0;
        return abandon();
    }
    // Logits of the last fed position alone (one matrix-vector pass over the head); the greedy tokens of the draft
    // positions in one batch, only once the first draft token is confirmed (engine argmax: screened on the CPU).
    int64_t h0 = fed - int64_t(draft.size()) - 1;
    auto head_rows = [&](int64_t r0, int64_t n) { return engine_->logits(h0 + r0, n); };
    Tensor logits = head_rows(0, 1);
    std::vector<int> draft_next; // draft_next[i]: the greedy token after draft token i
    st.prefill_ms = phase.ms();
    phase.reset();
    const int64_t V = logits.cols();
    int next = argmax(logits.ptr(), V);
    // With StreamOptions::logprobs, a whole-audio decode also takes each token's log-probability (next_lp, draft_lp)
    const bool want_lp = opts_.logprobs && full_decode;
    auto lp_of = [&](int tok) {
        float lp = 0;
        if (want_lp) ops::argmax_logprob(logits.ptr(), V, tok, lp);
        return lp;
    };
    float next_lp = lp_of(next);
    std::vector<float> draft_lp; // draft_lp[i]: draft_next[i]'s
    Ending ending;
    if (want_lp && !prefix.empty()) {
        // the forced prefix (a final without `speculative`) is part of the hypothesis: its tokens' rows are in this
        // pass, which starts at an audio row at the latest (reuse), before the prompt's suffix
        const std::vector<float> lp = logprobs_at(h0 - int64_t(prefix.size()), prefix);
        for (size_t i = 0; i < prefix.size(); ++i) ending.tokens.push_back({prefix[i], lp[i]});
    }
    std::vector<int> gen;
    // The draft whose KV rows follow position `base` in the cache: first the previous hypothesis (verified in the
    // prefill pass), later lookup drafts (verified in a sequential pass together with the token before them).
    size_t base = P, accepted = 0, lookup_accepted = 0;
    bool lookup = false; // the current draft is a lookup draft
    const bool lookups = opts_.speculative && !(final && opts_.exact_final);
    int run_len = 0;
    for (int n = 0; n < cap; ++n) {
        const int tok = next;
        run_len = (!gen.empty() && gen.back() == tok) ? run_len + 1 : 1;
        if (run_len > DecodeOptions{}.repetition_limit) { // the offline guard's default
            ending.reason = FinishReason::Repetition;
            break;
        }
        if (want_lp) ending.tokens.push_back({tok, next_lp});
        if (model_->is_eos(tok)) {
            ending.reason = FinishReason::Eos;
            break;
        }
        gen.push_back(tok);
        if (accepted < draft.size() && tok == draft[accepted]) { // its row is already in the cache
            ++accepted;
            if (lookup) ++lookup_accepted;
            else ++st.accepted_tokens;
            // every draft row can be read (drafts end before an EOS, the repetition limit and the cap)
            if (draft_next.empty()) {
                draft_next = engine_->argmax(h0 + 1, int64_t(draft.size()));
                if (want_lp) draft_lp = logprobs_at(h0 + 1, draft_next);
            }
            next = draft_next[accepted - 1];
            if (want_lp) next_lp = draft_lp[accepted - 1];
            continue;
        }
        engine_->truncate(int64_t(base + accepted)); // rows of the rejected draft tokens
        draft.clear();
        draft_next.clear();
        accepted = 0;
        if (n + 1 == cap) break; // no logits needed after the last token
        if (stop()) { // the cache holds the accepted tokens; the hypothesis ends at this one
            st.interrupted = true;
            break;
        }
        // Next pass: the token, plus a lookup draft of what may follow it when the tokens so far suggest one.
        std::vector<int> run = {tok};
        if (lookups) {
            draft = lookup_draft(hyp_, gen, size_t(std::min(kLookupMax, cap - n - 2)));
            trim(draft, tok, run_len);
            run.insert(run.end(), draft.begin(), draft.end());
            st.lookup_tokens += int(draft.size());
        }
        lookup = true;
        base = size_t(engine_->length()) + 1;
        if (!engine_->forward(engine_->embed(run), stop)) { // the pass did not count: the cache ends before tok
            st.interrupted = true;
            break;
        }
        h0 = 0;
        if (!draft.empty() && engine_->screened_argmax()) {
            // the token's row and the lookup draft's rows in one pass over the head (a lookup draft is short and
            // usually right: one screened pass instead of a matrix-vector pass and then a screened one)
            const std::vector<int> toks = engine_->argmax(0, 1 + int64_t(draft.size()));
            next = toks[0];
            draft_next.assign(toks.begin() + 1, toks.end());
            if (want_lp) {
                draft_lp = logprobs_at(0, toks);
                next_lp = draft_lp[0];
                draft_lp.erase(draft_lp.begin());
            }
        } else {
            logits = head_rows(0, 1);
            next = argmax(logits.ptr(), V);
            next_lp = lp_of(next);
        }
        ++st.decode_steps;
    }
    engine_->truncate(int64_t(base + accepted));
    if (full_decode) ending_ = std::move(ending);
    st.lookup_accepted = int(lookup_accepted);
    st.generated_tokens = int(gen.size());
    st.decode_ms = phase.ms();
    cached_ids_ = ids;
    cached_ids_.insert(cached_ids_.end(), gen.begin(), gen.end());
    cached_ids_.resize(size_t(engine_->length())); // the last generated token has not been fed back
    cached_audio_rows_ = A - tail.rows();
    hyp_ = prefix;
    hyp_.insert(hyp_.end(), gen.begin(), gen.end());
    prefix_len_ = prefix.size();
    if (!pause) ++chunk_index_; // pause steps do not count towards the unfixed chunks
    // 4. Events.
    const ParsedOutput full = parse_asr_output(model_->tokenizer.decode(hyp_), forced_);
    const ParsedOutput pre = parse_asr_output(model_->tokenizer.decode(prefix), forced_);
    if (!full.language.empty()) language_ = full.language;
    // Stable: the forced prefix; a pause step (no prefix) keeps the previous stable text when it still agrees.
    const std::string& keep = pause ? stable_ : pre.text;
    std::string stable = full.text.rfind(keep, 0) == 0 ? keep : "";
    stable_ = stable;
    st.ms = sw.ms();
    st.early_stem_chunks = early_chunks_;
    st.early_ms = early_ms_;
    early_chunks_ = 0;
    early_ms_ = 0;
    stats_.push_back(st);
    plan_early_stem();
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
    commit_segment(boundary, seg.text, ending_);
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
    stem_.clear();
    stem_min_.clear();
    stem_floor_.clear();
    stem_from_ = 0;
    floor_used_ = -1e30f;
    engine_->clear();
    cached_ids_.clear();
    cached_audio_rows_ = 0;
    hyp_.clear();
    prefix_len_ = 0;
    stable_.clear();
    next_step_at_ = chunk_samples_;
    next_check_at_ = kPauseBlock;
    quiet_blocks_ = 0;
    quiet_run_ = 0; // the rest pushed again below counts its own blocks
    endpoint_ok_ = false;
    plan_early_stem();
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

void StreamSession::commit_segment(size_t n, const std::string& text, const Ending& e) {
    const size_t first_token = final_.tokens.size();
    final_.tokens.insert(final_.tokens.end(), e.tokens.begin(), e.tokens.end());
    final_.finish = e.reason;
    if (opts_.logprobs && forced_.empty()) { // the language tag's probability, the lowest of the segments' (as offline)
        const double p = language_tag_probability(e.tokens, model_->special.asr_text);
        final_.language_probability = committed_ == 0 ? p : std::min(final_.language_probability, p);
    }
    ++committed_;
    if (text.empty()) return;
    n = std::min(n, audio_.size());
    auto [b, en] = speech_extent(audio_, 0, n, quiet_level(audio_, 0, n));
    if (b == en) b = 0, en = n;
    const std::string lang = forced_.empty() ? language_ : forced_;
    final_.segments.push_back({consumed_seconds_ + double(b) / kSampleRate, consumed_seconds_ + double(en) / kSampleRate,
                               opts_.itn ? postprocess_text(text, lang) : text, lang, first_token, e.tokens.size()});
}

std::vector<float> StreamSession::logprobs_at(int64_t r0, const std::vector<int>& ids) {
    const Tensor lg = engine_->logits(r0, int64_t(ids.size()));
    std::vector<float> lp(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) ops::argmax_logprob(lg.row(int64_t(i)), lg.cols(), ids[i], lp[i]);
    return lp;
}

TranscriptionResult StreamSession::finish() {
    if (finished_) return final_;
    finished_ = true;
    Stopwatch sw;
    if (opts_.endpoint_final && !opts_.exact_final && endpoint_ok_ && pause_blocks_ > 0) {
        // Approximate (opt-in): only quiet audio followed the last pause step, whose transcript is taken as final.
        const std::string text = parse_asr_output(model_->tokenizer.decode(endpoint_hyp_), forced_).text;
        committed_raw_text_ += text;
        commit_segment(audio_.size(), text, endpoint_ending_);
        endpoint_used_ = true;
    } else if (audio_.size() >= 400) {
        step(true);
        const std::string text = parse_asr_output(model_->tokenizer.decode(hyp_), forced_).text;
        committed_raw_text_ += text;
        commit_segment(audio_.size(), text, ending_);
    }
    consumed_seconds_ += double(audio_.size()) / kSampleRate;
    audio_.clear();
    final_.language = forced_.empty() ? language_ : forced_;
    final_.text = opts_.itn ? postprocess_text(committed_raw_text_, final_.language) : committed_raw_text_;
    final_.raw_text = committed_raw_text_;
    final_.audio_seconds = consumed_seconds_;
    if (committed_raw_text_.empty()) final_.finish = FinishReason::Empty; // else commit_segment's
    final_.timings.decode_ms = sw.ms();
    emit(StreamEvent::Kind::Final, final_.text, "");
    return final_;
}

double StreamSession::trailing_quiet_seconds() const {
    return heard_speech_ ? double(quiet_run_) * double(kPauseBlock) / kSampleRate : 0.0;
}

} // namespace qasr
