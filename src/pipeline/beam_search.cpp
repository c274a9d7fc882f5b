// Beam search (beam_search.hpp) and a Session's beams: one Session per beam, KV caches copied where beams fork.
#include "pipeline/beam_search.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"
#include "backend/device.hpp"
#include "pipeline/session.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace qasr {

namespace {

constexpr float kNeg = -1.0e9f; // the reference's score for entries that must not be chosen

struct Hyp {
    std::vector<int> tokens;
    std::vector<float> logprobs;
    float score = kNeg;
    bool finished = false; // a finished place: flagged by a stopped continuation
    BeamResult::End end = BeamResult::End::Cap;
};

struct Cand {
    float score; // running score + this token's log-probability
    int beam, token;
    float logprob;
    bool stops;
    BeamResult::End end;
};

// Indices of the n largest values, descending; equal values keep their order (the earlier entry first).
std::vector<int> top_n(const std::vector<float>& v, int n) {
    std::vector<int> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = int(i);
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return v[size_t(a)] > v[size_t(b)]; });
    idx.resize(size_t(std::min<int>(n, int(idx.size()))));
    return idx;
}

int trailing_run(const std::vector<int>& t, int tok) {
    int n = 0;
    for (auto it = t.rbegin(); it != t.rend() && *it == tok; ++it) ++n;
    return n;
}

} // namespace

BeamResult beam_search(const float* first, int64_t V, BeamDecoder& dec, const BeamConfig& c) {
    const int N = c.beams, K = beam_candidates(N, c.n_eos);
    if (N < 1) fail("beam", "beam search needs at least one beam");
    if (int64_t(K) > int64_t(N) * V) fail("beam", "beam search keeps more continuations than the beams have tokens");
    if (c.max_new_tokens < 1) fail("beam", "beam search needs a token cap of at least 1");
    const double lp = c.length_penalty;
    std::vector<Hyp> running(static_cast<size_t>(N)), finished(static_cast<size_t>(N));
    running[0].score = 0; // the others start at −1e9: the first step expands beam 0 alone
    bool improvable = true; // the reference's is_early_stop_heuristic_unsatisfied
    BeamResult res;
    const float* logits = first;
    int rows = 1; // rows of logits: the first step has one (every beam holds the prompt alone)
    const int per_row = int(std::min<int64_t>(K, V));
    std::vector<int64_t> ids(static_cast<size_t>(N) * size_t(per_row));
    std::vector<float> lps(static_cast<size_t>(N) * size_t(per_row));
    std::vector<Cand> cands;
    for (int cur = 0;; ++cur) {
        cands.clear();
        // each row's best continuations, the rows on the thread team (per_row ≤ V: nothing in here throws), unless
        // the decoder chose them
        if (logits) {
#pragma omp parallel for schedule(static) if (rows > 1)
            for (int b = 0; b < rows; ++b)
                ops::top_logprobs(logits + size_t(b) * size_t(V), V, per_row, ids.data() + size_t(b * per_row),
                                  lps.data() + size_t(b * per_row));
        } else {
            dec.top(per_row, ids.data(), lps.data());
        }
        for (int b = 0; b < rows; ++b) {
            // first step: beams 1 … N−1 (score −1e9) continue the same row; they only count where V < K
            for (int r = b; r < (rows == 1 && per_row < K ? N : b + 1); ++r)
                for (int j = b * per_row; j < (b + 1) * per_row; ++j)
                    cands.push_back({lps[size_t(j)] + running[size_t(r)].score, r, int(ids[size_t(j)]), lps[size_t(j)],
                                     false, BeamResult::End::Cap});
        }
        // the K best over all beams (beam-major order breaks ties: lower beam, then lower id)
        std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) { return a.score > b.score; });
        cands.resize(size_t(K));
        bool all_stop = true;
        for (Cand& k : cands) {
            const Hyp& h = running[size_t(k.beam)];
            if (c.repetition_limit > 0 && trailing_run(h.tokens, k.token) + 1 > c.repetition_limit)
                k.stops = true, k.end = BeamResult::End::Repetition;
            else if (c.is_eos && c.is_eos(k.token))
                k.stops = true, k.end = BeamResult::End::Eos;
            else if (cur + 1 >= c.max_new_tokens)
                k.stops = true, k.end = BeamResult::End::Cap;
            all_stop = all_stop && k.stops;
        }
        // The N best continuations that did not stop run on (stopped ones only where fewer remain, at −1e9).
        std::vector<float> run_scores(static_cast<size_t>(K));
        for (int k = 0; k < K; ++k) run_scores[size_t(k)] = cands[size_t(k)].score + (cands[size_t(k)].stops ? kNeg : 0.0f);
        const std::vector<int> next = top_n(run_scores, N);
        // Stopped continuations among the first N compete with the finished places.
        const float denom = float(std::pow(double(cur + 1), lp));
        std::vector<float> merged(static_cast<size_t>(N + K));
        for (int i = 0; i < N; ++i) merged[size_t(i)] = finished[size_t(i)].score;
        for (int k = 0; k < K; ++k) {
            float s = cands[size_t(k)].score / denom;
            if (!improvable) s += kNeg;
            if (!(k < N && cands[size_t(k)].stops)) s += kNeg;
            merged[size_t(N + k)] = s;
        }
        auto extend = [&](const Cand& k) {
            Hyp h = running[size_t(k.beam)];
            h.tokens.push_back(k.token);
            h.logprobs.push_back(k.logprob);
            return h;
        };
        std::vector<Hyp> fin;
        for (int i : top_n(merged, N)) {
            if (i < N) {
                fin.push_back(finished[size_t(i)]);
                continue;
            }
            const Cand& k = cands[size_t(i - N)];
            Hyp h = extend(k);
            h.score = merged[size_t(i)];
            h.finished = i - N < N && k.stops;
            h.end = k.end;
            fin.push_back(std::move(h));
        }
        finished = std::move(fin);
        std::vector<Hyp> nrun;
        std::vector<int> parent, tokens;
        for (int k : next) {
            Hyp h = extend(cands[size_t(k)]);
            h.score = run_scores[size_t(k)];
            nrun.push_back(std::move(h));
            parent.push_back(cands[size_t(k)].beam);
            tokens.push_back(cands[size_t(k)].token);
        }
        running = std::move(nrun);
        // Can a running beam still beat the worst finished place (judged at its current length)?
        const float best = running[0].score / float(std::pow(double(cur + 1), lp));
        bool all_finished = true;
        float worst = finished[0].score;
        for (const Hyp& h : finished) all_finished = all_finished && h.finished, worst = std::min(worst, h.score);
        improvable = improvable && (!all_finished || best > worst);
        if (!improvable || all_stop) break;
        logits = dec.advance(parent, tokens);
        rows = N;
        ++res.steps;
    }
    const Hyp& best = finished[0].finished ? finished[0] : running[0];
    res.tokens = best.tokens;
    res.logprobs = best.logprobs;
    res.score = best.score;
    res.end = best.end;
    if (res.end == BeamResult::End::Repetition && !res.tokens.empty()) { // the repeat that stopped it is not kept
        res.tokens.pop_back();
        res.logprobs.pop_back();
    }
    return res;
}

// ---------------------------------------------------------------------------------------------------------------
// A Session's beams: beam b lives in session slot_[b]. A step first gives each parent's state to its first child
// (no copy), then copies a parent's KV cache into a session no beam holds any more for each further child — only
// the positions after the two sessions' common prefix — and then advances every beam in one batched step (the CPU's
// Session::step_batch; a device's DeviceBatch::step_top, which also chooses each row's best continuations).
class SessionBeams final : public BeamDecoder {
public:
    SessionBeams(Session& main, std::shared_ptr<const Model> model, int n, int k, int64_t prompt_len, int64_t vocab)
        : model_(std::move(model)), prompt_(prompt_len), V_(vocab), k_(k) {
        s_.push_back(&main);
        for (int i = 1; i < n; ++i) {
            own_.push_back(std::make_unique<Session>(model_));
            s_.push_back(own_.back().get());
        }
        hist_.resize(size_t(n));
        ready_.assign(size_t(n), false);
        ready_[0] = true;
        slot_.assign(size_t(n), 0); // every beam starts from the prompt in session 0
    }

    const float* advance(const std::vector<int>& parent, const std::vector<int>& tokens) override {
        s_[0]->check_abort(); // the request's own session (TranscribeOptions::abort, on_progress)
        s_[0]->step_done();
        Stopwatch sw;
        const size_t n = parent.size(), S = s_.size();
        std::vector<bool> claimed(S, false);
        std::vector<int> slot(n, -1);
        for (size_t b = 0; b < n; ++b) {
            const int s = slot_[size_t(parent[b])];
            if (!claimed[size_t(s)]) claimed[size_t(s)] = true, slot[b] = s;
        }
        std::vector<int> free;
        for (size_t s = S; s-- > 0;)
            if (!claimed[s]) free.push_back(int(s));
        for (size_t b = 0; b < n; ++b) {
            if (slot[b] >= 0) continue;
            const int src = slot_[size_t(parent[b])], d = free.back();
            free.pop_back();
            int64_t from = 0;
            if (ready_[size_t(d)]) {
                const std::vector<int>&a = hist_[size_t(d)], &h = hist_[size_t(src)];
                size_t c = 0;
                while (c < a.size() && c < h.size() && a[c] == h[c]) ++c;
                from = prompt_ + int64_t(c);
            }
            s_[size_t(d)]->copy_state_from(*s_[size_t(src)], from);
            ++forks;
            hist_[size_t(d)] = hist_[size_t(src)];
            ready_[size_t(d)] = true;
            claimed[size_t(d)] = true;
            slot[b] = d;
        }
        slot_ = slot;
        copy_ms += sw.ms();
        std::vector<Session*> rows(n);
        for (size_t b = 0; b < n; ++b) {
            rows[b] = s_[size_t(slot[b])];
            hist_[size_t(slot[b])].push_back(tokens[b]);
        }
        if (model_->device) { // one batched device step (each weight read once for all beams) that also chooses
                              // each row's k best continuations
            if (!batch_) batch_ = model_->device->open_batch(int(S));
            if (!batch_) fail("beam", "beam search needs batched steps, which " + model_->device->name() + " lacks");
            top_ids_.resize(n * size_t(k_));
            top_lps_.resize(n * size_t(k_));
            Session::step_top_device(rows.data(), tokens.data(), n, *batch_, k_, top_ids_.data(), top_lps_.data());
            advance_ms += sw.ms();
            return nullptr; // top() gives the rows' choices
        }
        logits_ = Session::step_batch(rows.data(), tokens.data(), n);
        advance_ms += sw.ms();
        return logits_.ptr();
    }
    void top(int k, int64_t* ids, float* logprobs) override {
        if (k != k_) fail("beam", "the device chose another number of continuations per row");
        for (size_t i = 0; i < top_ids_.size(); ++i) {
            if (top_ids_[i] < 0 || top_ids_[i] >= V_)
                fail("beam", "no valid continuation (non-finite logits: check the checkpoint's weights)");
            ids[i] = top_ids_[i], logprobs[i] = top_lps_[i];
        }
    }
    double copy_ms = 0, advance_ms = 0; // KV copies; whole steps (copies included)
    int forks = 0;

private:
    std::shared_ptr<const Model> model_;
    int64_t prompt_, V_;
    int k_; // continuations per row (BeamConfig's K capped at V)
    std::vector<int> top_ids_;
    std::vector<float> top_lps_;
    std::vector<Session*> s_;
    std::vector<std::unique_ptr<Session>> own_;
    std::vector<std::vector<int>> hist_; // generated tokens each session's cache holds (after the prompt)
    std::vector<bool> ready_;            // whether the session holds the prompt
    std::vector<int> slot_;              // beam → session
    Tensor logits_;
    std::unique_ptr<DeviceBatch> batch_; // on a device
};

void Session::copy_state_from(Session& src, int64_t from) {
    if (src.model_ != model_) fail("session", "beam sessions must share one model");
    if (accel_) accel_->copy_cache(*src.accel_, from);
    else cache_.copy_from(src.cache_, from);
}

void Session::decode_beams() {
    BeamConfig c;
    c.beams = st_.d.beam_size;
    c.length_penalty = st_.d.length_penalty;
    c.max_new_tokens = st_.cap;
    c.repetition_limit = st_.d.repetition_limit;
    c.n_eos = int(model_->eos_ids.size());
    c.is_eos = [this](int t) { return model_->is_eos(t); };
    if (!accel_) check_kv_memory(int64_t(st_.r.n_prompt_tokens) + st_.cap + 128, c.beams, "the beam search");
    const int k = int(std::min<int64_t>(beam_candidates(c.beams, c.n_eos), st_.V));
    if (accel_ && k > 64) fail("options", "beam search on a device keeps at most 64 continuations per step: use fewer beams");
    SessionBeams beams(*this, model_, c.beams, k, int64_t(st_.r.n_prompt_tokens), st_.V);
    Stopwatch sw;
    step_done(); // the prefill's choices
    const BeamResult b = beam_search(st_.logits.ptr(), st_.V, beams, c);
    const double total = sw.ms();
    char msg[192];
    std::snprintf(msg, sizeof msg, "beam search: %d beams, %d steps in %.2f ms: choosing %.2f ms, KV copies %.2f ms (%d forks), decoder steps %.2f ms",
                  c.beams, b.steps, total, total - beams.advance_ms, beams.copy_ms, beams.forks,
                  beams.advance_ms - beams.copy_ms);
    log(LogLevel::Info, msg);
    TranscriptionResult& r = st_.r;
    for (size_t i = 0; i < b.tokens.size(); ++i) {
        r.tokens.push_back({b.tokens[i], b.logprobs[i]});
        if (model_->is_eos(b.tokens[i])) continue;
        st_.out.push_back(b.tokens[i]);
        if (st_.deltas) st_.deltas->push(b.tokens[i], b.logprobs[i]);
    }
    r.finish = b.end == BeamResult::End::Eos          ? FinishReason::Eos
               : b.end == BeamResult::End::Repetition ? FinishReason::Repetition
                                                      : FinishReason::TokenCap;
}

} // namespace qasr
