// The CUDA backend's per-session engine — prefill, decode steps, the greedy loop with a captured step graph and
// one-step-behind readback (the class in cuda_session.hpp, its encoder in cuda_encoder.cu). The device context
// that owns the uploaded weights and a pool of sessions is in cuda_context.cu.
#include "backend/cuda/cuda_session.hpp"

#include "core/log.hpp"
#include "core/timer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace qasr::cuda {

namespace detail {


void CudaSession::gemm_w(const bf16* A, int M, const DMat& W, float* C, float beta) {
    const bf16* Wb = static_cast<const bf16*>(W.data);
    if (W.bits != 16) {
        deq_.ensure(size_t(W.rows * W.cols) * 2);
        dequant_bf16(W, deq_.as<bf16>(), qs_);
        Wb = deq_.as<bf16>();
    }
    gemm_->run(A, M, int(W.cols), Wb, int(W.rows), C, beta, qs_);
}

void CudaSession::ensure_kv(int64_t need) {
    if (need <= cap_) return;
    const int64_t ncap = ((need + 1023) / 1024) * 1024;
    const size_t L = w_.dec.size();
    Buffer nk(L * 2 * size_t(ncap * kvrow_) * 4);
    for (size_t l = 0; l < L && len_ > 0; ++l)
        for (int kv = 0; kv < 2; ++kv)
            QASR_CUDA(cudaMemcpyAsync(nk.as<float>() + (2 * l + kv) * size_t(ncap * kvrow_),
                                      kv_.as<float>() + (2 * l + kv) * size_t(cap_ * kvrow_),
                                      size_t(len_ * kvrow_) * 4, cudaMemcpyDeviceToDevice, s_));
    if (len_ > 0) QASR_CUDA(cudaStreamSynchronize(s_));
    kv_ = std::move(nk);
    cap_ = ncap;
}

void CudaSession::reserve_kv(int64_t positions) {
    settle();
    join_capture(); // the recording thread reads the buffers ensure_kv may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    len_ = 0;
    ensure_kv(positions);
}

size_t CudaSession::scaling_bytes() const {
    size_t n = 0;
    for (const Buffer* b : {&kv_, &px_, &pbf_, &pqkv_, &pq_, &po_, &pgu_, &plog_, &emel_, &ecols_, &ea_, &eb_, &eflat_,
                            &eco_, &ex_, &ebf_, &eqkv_, &eatt_, &eu_, &eout_, &plog_screen_, &mwork_, &maudio_})
        n += b->size();
    return n;
}

Tensor CudaSession::prefill(const std::vector<int>& ids, int64_t audio_begin, const Tensor& rows, int logits) {
    settle();
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (rows.rows() && rows.cols() != D_) fail("decoder", "audio rows do not fit the prompt");
    return prefill_rows(ids, audio_begin, rows.rows(), rows.rows() ? rows.ptr() : nullptr, false, logits);
}

void CudaSession::prefill_resident(const std::vector<int>& ids, int64_t audio_begin) {
    settle();
    if (resident_ < 0) fail("decoder", "prefill_resident() without encode_audio_resident() before it");
    const int64_t A = resident_;
    resident_ = -1;
    if (int64_t(w_.proj2.rows) != D_) fail("decoder", "the projector's width is not the decoder's");
    prefill_rows(ids, audio_begin, A, eout_.as<float>(), true, 0);
}

Tensor CudaSession::prefill_rows(const std::vector<int>& ids, int64_t audio_begin, int64_t A, const float* src,
                                 bool on_device, int logits) {
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const int L = int(ids.size());
    if (L <= 0) fail("decoder", "empty prompt");
    for (int id : ids)
        if (id < 0 || id >= vocab_) fail("decoder", "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab_));
    if (A && (audio_begin < 0 || audio_begin + A > L)) fail("decoder", "audio rows do not fit the prompt");
    len_ = 0;
    first_queued_ = false;
    ensure_kv(L + 1024);
    px_.ensure(size_t(L) * D_ * 4);
    float* x = px_.as<float>();
    // ids → device through the scratch of the logits (ints fit in a float buffer; sized for the logits up front,
    // so head_rows() does not reallocate it under the queued embedding)
    plog_.ensure(std::max(size_t(L) * 4, logits < 0 ? size_t(L) * V_ * 4 : size_t(V_) * 4));
    QASR_CUDA(cudaMemcpyAsync(plog_.get(), ids.data(), size_t(L) * 4, cudaMemcpyHostToDevice, s_));
    embed(w_.embed, plog_.as<int>(), L, x, s_);
    if (A)
        QASR_CUDA(cudaMemcpyAsync(x + audio_begin * D_, src, size_t(A) * D_ * 4,
                                  on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, s_));
    const float eps = m_.hp.text.rms_eps;
    decoder_rows(L); // len_ = L, pos = L
    Tensor out;
    if (logits < 0) {
        const float* lg = head_rows(x, L);
        QASR_CUDA(cudaMemcpyAsync(logits1_.get(), lg + size_t(L - 1) * V_, size_t(V_) * 4, cudaMemcpyDeviceToDevice, s_));
        out = Tensor({int64_t(L), int64_t(V_)});
        QASR_CUDA(cudaMemcpyAsync(out.ptr(), lg, out.size() * 4, cudaMemcpyDeviceToHost, s_));
    } else {
        const float* xl = x + size_t(L - 1) * D_;
        if (logits == 0 && w_.head_screen) {
            // greedy follows (prefill_resident): the first token through the screened head, as every decode step's
            // (its token is the full head's), into ring slot 0 with its embedding folded into the first step's input
            set_ints(d_count(), 0, 0, s_);
            first_queued_ = screened_choice(xl, false);
            screen_steps_ += first_queued_;
        }
        // else the last row's logits (the first token's): the decode step's LM head kernel where it applies (its
        // argmax partials are recomputed by greedy()'s argmax_token from these logits)
        if (!first_queued_ && !lm_head_argmax(w_.head, xl, w_.norm, eps, logits1_.as<float>(), argpart_.as<float>(), kArgParts, s_))
            matvec(w_.head, xl, w_.norm, eps, logits1_.as<float>(), Epi::Store, s_);
        if (logits > 0) {
            out = Tensor({1, int64_t(V_)});
            QASR_CUDA(cudaMemcpyAsync(out.ptr(), logits1_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
        }
    }
    // (also for prefill_resident(), where greedy() follows on the stream: without this wait the prefill's device time
    // lands in the decode stage's, and the per-token figure; measured ~0–0.03 ms end to end, H200)
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

const float* CudaSession::head_rows(const float* x, int n) {
    pbf_.ensure(size_t(n) * D_ * 2);
    rms_norm(x, n, D_, w_.norm, m_.hp.text.rms_eps, nullptr, pbf_.as<bf16>(), s_);
    plog_.ensure(size_t(n) * V_ * 4);
    gemm_w(pbf_.as<bf16>(), n, w_.head, plog_.as<float>(), 0.0f);
    return plog_.as<float>();
}

void CudaSession::run_pass(const PassKey& key, std::function<PassKey()> key_now, std::function<void()> enqueue) {
    join_capture();
    auto it = pass_graphs_.find(key);
    if (it != pass_graphs_.end()) {
        QASR_CUDA(cudaGraphLaunch(it->second, s_));
        return;
    }
    enqueue();
    if (!pass_graphs_on_ || !record_ || profile_ || hosttime_) return;
    if (pending_.size() >= 4) pending_.erase(pending_.begin()); // requests without a greedy loop: bounded
    pending_.push_back({key, std::move(key_now), std::move(enqueue)});
}

void CudaSession::capture_pending() {
    if (pending_.empty() || capw_.joinable()) return;
    if (!cs_) QASR_CUDA(cudaStreamCreateWithFlags(&cs_, cudaStreamNonBlocking));
    std::vector<PendingPass> work;
    work.swap(pending_);
    capw_ = std::thread([this, work = std::move(work)]() {
        if (cudaSetDevice(w_.ordinal) != cudaSuccess) return;
        for (const PendingPass& p : work) {
            // the pass's buffers and KV cache are still the ones its key names (the main thread changes none of them
            // until join_capture)
            if (!(p.key_now() == p.key) || pass_graphs_.count(p.key)) continue;
            cudaGraph_t g = nullptr;
            cudaGraphExec_t ge = nullptr;
            bool ok = cudaStreamBeginCapture(cs_, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
            if (ok) {
                qs_ = cs_;
                try {
                    p.enqueue();
                } catch (...) {
                    ok = false;
                }
                qs_ = s_;
                ok = cudaStreamEndCapture(cs_, &g) == cudaSuccess && ok && g;
            }
            ok = ok && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
            if (g) cudaGraphDestroy(g);
            cudaGetLastError(); // a failed recording leaves the pass eager
            if (ok) recorded_.emplace_back(p.key, ge);
            else if (ge) cudaGraphExecDestroy(ge);
        }
    });
}

void CudaSession::join_capture() noexcept {
    if (capw_.joinable()) capw_.join();
    for (auto& [k, g] : recorded_) {
        if (pass_graphs_.size() >= kPassGraphs) { // full: start over (many lengths, each seen more than once)
            cudaStreamSynchronize(s_);
            for (auto& [k2, g2] : pass_graphs_) cudaGraphExecDestroy(g2);
            pass_graphs_.clear();
        }
        if (!pass_graphs_.emplace(k, g).second) cudaGraphExecDestroy(g);
    }
    recorded_.clear();
}

void CudaSession::decoder_rows(int L) {
    const int qw = Hq_ * hd_;
    pbf_.ensure(size_t(L) * std::max({D_, qw, I_}) * 2);
    pqkv_.ensure(size_t(L) * qkvw_ * 4);
    pq_.ensure(size_t(L) * qw * 4);
    po_.ensure(size_t(L) * qw * 4);
    pgu_.ensure(size_t(L) * 2 * I_ * 4);
    Stopwatch sw;
    const int64_t pos0 = len_;
    auto key_now = [this, L, pos0] {
        return PassKey{1, L, pos0, cap_, {px_.get(), pbf_.get(), pqkv_.get(), pq_.get(), po_.get(), pgu_.get(), kv_.get(), deq_.get()}};
    };
    run_pass(key_now(), key_now, [this, L, pos0] { queue_decoder_rows(L, pos0); });
    rows_flush("prefill");
    npev_ = 0;
    host_report("prefill", L, sw);
    len_ += L;
    set_ints(d_pos(), int(len_), 0, s_);
}

void CudaSession::queue_decoder_rows(int L, int64_t pos0, const BatchRows* rows, int splits) {
    if (!rows) set_ints(d_pos(), int(pos0), 0, qs_); // the rows' first position; count = 0
    const int I = I_;
    float* x = px_.as<float>();
    bf16* ubf = pbf_.as<bf16>();
    const float eps = m_.hp.text.rms_eps;
    if (profile_) ++prof_calls_[rows ? "batch" + std::to_string(L) : std::string("prefill")], npev_ = 0, mark("start");
    for (size_t li = 0; li < w_.dec.size(); ++li) {
        const DevDecLayer& l = w_.dec[li];
        rms_norm(x, L, D_, l.in_norm, eps, nullptr, ubf, qs_);
        mark("norm");
        gemm_w(ubf, L, l.qkv, pqkv_.as<float>(), 0.0f);
        mark("qkv");
        if (rows && queue_rows_attention(li, L, splits, rows, qs_)) { // a batched step: one kernel, float out
            to_bf16(po_.as<float>(), size_t(L) * Hq_ * hd_, ubf, qs_);
        } else {
            const RowsKv rk{rows, int(li)};
            qk_norm_rope_kv(pqkv_.as<float>(), L, d_pos(), Hq_, Hkv_, hd_, l.q_norm, l.k_norm, eps, w_.inv_freq,
                            pq_.as<float>(), kc(li), vc(li), qs_, rk);
            mark("qk_norm_rope");
            AttnArgs at = dec_attn(li, pq_.as<float>(), po_.as<float>(), L);
            at.past = d_pos();
            at.keys_hint = int(pos0) + L;
            at.ob = ubf; // the o product's operand directly
            if (rows) { // each row over its own session's cache: the row-per-warp kernel, keys split, then merged
                at.splits = kRowsSplits;
                at.part = rows_part_.as<float>();
            }
            attention(at, qs_, rk);
        }
        mark("attention");
        gemm_w(ubf, L, l.o, x, 1.0f);
        mark("o");
        rms_norm(x, L, D_, l.post_norm, eps, nullptr, ubf, qs_);
        mark("norm");
        gemm_w(ubf, L, l.gateup, pgu_.as<float>(), 0.0f);
        mark("gateup");
        swiglu_bf16(pgu_.as<float>(), L, I, ubf, qs_);
        mark("swiglu");
        gemm_w(ubf, L, l.down, x, 1.0f);
        mark("down");
    }
}

void CudaSession::extend(const Tensor& xin) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const int n = int(xin.rows());
    if (n <= 0 || xin.cols() != D_) fail("decoder", "extend() needs rows of the model width");
    first_queued_ = false;
    ensure_kv(len_ + n + 1);
    px_.ensure(size_t(n) * D_ * 4);
    QASR_CUDA(cudaMemcpyAsync(px_.get(), xin.ptr(), xin.size() * 4, cudaMemcpyHostToDevice, s_));
    decoder_rows(n);
    ext_rows_ = n;
    QASR_CUDA(cudaStreamSynchronize(s_));
}

Tensor CudaSession::extended_logits(int64_t r0, int64_t n) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (r0 < 0 || n <= 0 || r0 + n > ext_rows_) fail("decoder", "logits of rows outside the last extend()");
    const float* x = px_.as<float>() + size_t(r0) * D_;
    const float* lg = logits1_.as<float>();
    if (n == 1) // as the offline path's first token (prefill → matrix-vector head over the float32 row)
        matvec(w_.head, x, w_.norm, m_.hp.text.rms_eps, logits1_.as<float>(), Epi::Store, s_);
    else
        lg = head_rows(x, int(n));
    Tensor out({n, int64_t(V_)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), lg, out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

// One decode step on the stream: token *d_tok at position *d_pos → logits1_, then the greedy choice into d_tok,
// the ring and ++pos. Everything reads its position from device memory, so the sequence can be captured once.
void CudaSession::enqueue_step(bool screened) {
    const float eps = m_.hp.text.rms_eps;
    float* x = x1_.as<float>();
    mark("start");
    if (!embed_fold_ && run("embed")) embed(w_.embed, d_tok(), 1, x, s_); // else the previous argmax wrote x
    mark("embed");
    for (size_t li = 0; li < w_.dec.size(); ++li) {
        const DevDecLayer& l = w_.dec[same_layer_ ? 0 : li];
        const bool qkv_early = run("qkv") && matvec(l.qkv, x, l.in_norm, eps, qkv1_.as<float>(), Epi::Store, s_, early("qkv"));
        mark("qkv");
        const bool attn = run("attn");
        if (attn && fused_attn_) {
            DecAttnArgs da;
            da.qkv = qkv1_.as<float>(), da.pos = d_pos(), da.Hq = Hq_, da.Hkv = Hkv_, da.hd = hd_;
            da.qn = l.q_norm, da.kn = l.k_norm, da.eps = eps, da.inv_freq = w_.inv_freq;
            da.kc = kc(li), da.vc = vc(li), da.o = o1_.as<float>();
            da.splits = dec_splits_, da.part = part_.as<float>(), da.counter = counter_.as<unsigned>();
            da.pre_wait = attn_pre_ < 0 ? qkv_early : attn_pre_ == 1;
            da.cluster = attn_cluster_;
            da.early = early("attn");
            decode_attention(da, s_);
        } else if (attn) {
            qk_norm_rope_kv(qkv1_.as<float>(), 1, d_pos(), Hq_, Hkv_, hd_, l.q_norm, l.k_norm, eps, w_.inv_freq,
                            q1_.as<float>(), kc(li), vc(li), s_);
            mark("qk_norm_rope");
            AttnArgs at = dec_attn(li, q1_.as<float>(), o1_.as<float>(), 1);
            at.past = d_pos();
            at.splits = dec_splits_;
            at.part = part_.as<float>();
            attention(at, s_);
        }
        mark("attention");
        if (run("o")) matvec(l.o, o1_.as<float>(), nullptr, eps, x, Epi::Add, s_, early("o"));
        mark("o_proj");
        if (run("gateup")) matvec(l.gateup, x, l.post_norm, eps, h1_.as<float>(), Epi::SwiGLU, s_, early("gateup"));
        mark("gate_up");
        if (run("down")) matvec(l.down, h1_.as<float>(), nullptr, eps, x, Epi::Add, s_, early("down"));
        mark("down");
    }
    if (screened && run("head") && screened_choice(x, true)) {
        mark("lm_head");
    } else if (const int parts = run("head") ? lm_head_argmax(w_.head, x, w_.norm, eps, logits1_.as<float>(),
                                                              argpart_.as<float>(), kArgParts, s_) : 0) {
        mark("lm_head");
        argmax_merge(logits1_.as<float>(), argpart_.as<float>(), parts, d_tok(), d_pos(), d_count(), ring_d_, kRing, true,
                     s_, fold_emb(), x);
    } else {
        if (run("head")) matvec(w_.head, x, w_.norm, eps, logits1_.as<float>(), Epi::Store, s_);
        mark("lm_head");
        argmax_token(logits1_.as<float>(), V_, argpart_.as<float>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, true, s_,
                     fold_emb(), x);
    }
    mark("argmax");
}

// QASR_CUDA_SCREEN_BOUND_X (measurement only): the screen's bounds multiplied by this factor, to count the rows a
// looser proxy (a lower bit width) would make the screen rescore. Still exact: the bound only widens.
static const float g_bound_x = [] {
    const char* e = std::getenv("QASR_CUDA_SCREEN_BOUND_X");
    const float v = e ? std::strtof(e, nullptr) : 1.0f;
    return v >= 1.0f && v < 1e6f ? v : 1.0f;
}();

bool CudaSession::screened_choice(const float* x, bool advance) {
    if (!w_.head_screen) return false;
    const float eps = m_.hp.text.rms_eps;
    float* emb_out = x1_.as<float>(); // the next step's input
    if (screened_head_choose(w_.head, w_.head_screen, x, w_.norm, eps, plog_screen_.as<float>(), hrec_.as<float>(), kArgParts,
                             hcounter_.as<unsigned>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, advance, fold_emb(),
                             emb_out, screen_stats_.as<unsigned>(), s_, 1.01f * g_bound_x))
        return true;
    int parts = 0;
    const int nx = screened_head_argmax(w_.head, w_.head_screen, x, w_.norm, eps, plog_screen_.as<float>(), argpart_.as<float>(),
                                        kArgParts, &parts, xpart_.as<float>(), kArgParts, screen_stats_.as<unsigned>(), s_,
                                        1.01f * g_bound_x);
    if (!nx || !parts) return false;
    argmax_merge(plog_screen_.as<float>(), argpart_.as<float>(), parts, d_tok(), d_pos(), d_count(), ring_d_, kRing, advance,
                 s_, fold_emb(), emb_out, xpart_.as<float>(), nx);
    return true;
}

void CudaSession::launch_persistent() {
    if (players_kv_ != kv_.get()) {
        std::vector<PersistLayer> hl(w_.dec.size());
        for (size_t li = 0; li < w_.dec.size(); ++li) {
            const DevDecLayer& l = w_.dec[li];
            hl[li] = PersistLayer{static_cast<const uint16_t*>(l.qkv.data), static_cast<const uint16_t*>(l.o.data),
                                  static_cast<const uint16_t*>(l.gateup.data), static_cast<const uint16_t*>(l.down.data),
                                  l.in_norm, l.post_norm, l.q_norm, l.k_norm, kc(li), vc(li)};
        }
        QASR_CUDA(cudaMemcpyAsync(players_.get(), hl.data(), hl.size() * sizeof(PersistLayer), cudaMemcpyHostToDevice, s_));
        QASR_CUDA(cudaStreamSynchronize(s_));
        players_kv_ = kv_.get();
    }
    PersistArgs a;
    a.layers = players_.as<PersistLayer>(), a.L = int(w_.dec.size()), a.D = D_, a.Hq = Hq_, a.Hkv = Hkv_, a.hd = hd_;
    a.I = I_, a.V = V_, a.eps = m_.hp.text.rms_eps, a.inv_freq = w_.inv_freq;
    a.embed = static_cast<const uint16_t*>(w_.embed.data), a.head = static_cast<const uint16_t*>(w_.head.data);
    a.norm = w_.norm, a.tok = d_tok(), a.pos = d_pos(), a.count = d_count(), a.ring = ring_d_, a.ring_size = kRing;
    a.x = x1_.as<float>(), a.qkv = qkv1_.as<float>(), a.attn = o1_.as<float>(), a.h = h1_.as<float>();
    a.logits = logits1_.as<float>(), a.splits = psplits_, a.part = part_.as<float>();
    a.argpart = argpart_.as<float>();
    a.prof = pprof_.get() ? pprof_.as<unsigned long long>() : nullptr;
    persistent_step(a, plaunch_, s_);
}

void CudaSession::launch_step(bool screened) {
    if (persistent_ && !profile_) return launch_persistent();
    screened = screened && bool(w_.head_screen);
    screen_steps_ += screened;
    if (profile_) { // eager, with an event after each kernel group
        npev_ = 0;
        dec_splits_ = splits_for(len_ + 1);
        enqueue_step(screened);
        QASR_CUDA(cudaStreamSynchronize(s_));
        for (int i = 1; i < npev_; ++i) {
            float ms = 0;
            QASR_CUDA(cudaEventElapsedTime(&ms, pev_[i - 1], pev_[i]));
            prof_[pname_[i]] += ms;
        }
        ++prof_steps_;
        return;
    }
    if (graph_kv_ != kv_.get()) { // every bucket's graph at once: no capture inside a later request
        for (auto& [n, g] : graphs_) QASR_CUDA(cudaGraphExecDestroy(g));
        graphs_.clear();
        for (const int keys : {128, 256, 257})
            for (const bool sc : {false, true}) {
                const int n = splits_for(keys);
                if ((sc && !w_.head_screen) || graphs_.count(2 * n + sc)) continue;
                graphs_[2 * n + sc] = capture_step(n, sc);
            }
        graph_kv_ = kv_.get();
    }
    const int n = splits_for(len_ + 1); // the step attends over len_ + 1 keys
    auto it = graphs_.find(2 * n + screened);
    if (it == graphs_.end()) it = graphs_.emplace(2 * n + screened, capture_step(n, screened)).first;
    QASR_CUDA(cudaGraphLaunch(it->second, s_));
}

cudaGraphExec_t CudaSession::capture(const std::function<void()>& enqueue) {
    cudaGraph_t g = nullptr;
    QASR_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    try {
        enqueue();
    } catch (...) {
        cudaStreamEndCapture(s_, &g);
        if (g) cudaGraphDestroy(g);
        throw;
    }
    QASR_CUDA(cudaStreamEndCapture(s_, &g));
    cudaGraphExec_t ge = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    QASR_CUDA(e);
    return ge;
}

cudaGraphExec_t CudaSession::capture_step(int splits, bool screened) {
    dec_splits_ = splits;
    return capture([&] { enqueue_step(screened); });
}

Tensor CudaSession::step(int token) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (token < 0 || token >= vocab_) fail("decoder", "token id " + std::to_string(token) + " is outside the vocabulary");
    if (len_ <= 0) fail("decoder", "step() before prefill()");
    first_queued_ = false;
    ensure_kv(len_ + 1);
    *tok_h_ = token;
    QASR_CUDA(cudaMemcpyAsync(d_tok(), tok_h_, sizeof(int), cudaMemcpyHostToDevice, s_));
    if (embed_fold_) embed(w_.embed, d_tok(), 1, x1_.as<float>(), s_); // the step's input (the graph has no embed)
    launch_step(false);
    ++len_;
    Tensor out({1, int64_t(V_)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), logits1_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

void CudaSession::copy_cache(DeviceSession& src, int64_t from) {
    settle();
    auto* o = dynamic_cast<CudaSession*>(src.inner());
    if (!o || &o->w_ != &w_) fail("cuda", "a KV cache copy needs two sessions of one device model");
    if (o == this) return;
    if (from < 0 || from > len_ || from > o->len_) fail("cuda", "KV cache copy from a position past the cache");
    join_capture(); // the recording thread reads the buffers ensure_kv may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    QASR_CUDA(cudaStreamSynchronize(o->s_)); // src's last writes (its steps run on its own stream)
    len_ = from;                              // nothing after `from` needs keeping if the cache grows
    ensure_kv(o->len_ + 1);
    // every layer's keys and values in one 2-D copy: 2·layers blocks of (len − from) positions, one block per
    // layer and kind, `cap` positions apart in each cache
    const size_t n = size_t((o->len_ - from) * kvrow_) * 4;
    if (n > 0)
        QASR_CUDA(cudaMemcpy2DAsync(kv_.as<float>() + size_t(from * kvrow_), size_t(cap_ * kvrow_) * 4,
                                    o->kv_.as<float>() + size_t(from * kvrow_), size_t(o->cap_ * kvrow_) * 4, n,
                                    2 * w_.dec.size(), cudaMemcpyDeviceToDevice, s_));
    len_ = o->len_;
    first_queued_ = false;
    set_ints(d_pos(), int(len_), 0, s_);
    QASR_CUDA(cudaStreamSynchronize(s_)); // src may step on as soon as this returns
}

void CudaSession::greedy(int max_tokens, const std::function<bool(int, float)>& take) {
    settle();
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (len_ <= 0) fail("decoder", "greedy() before prefill()");
    if (max_tokens <= 0) return;
    join_capture();
    ensure_kv(len_ + max_tokens + 1);
    // Token 0 comes from the prefill's logits (already on the device), or is already in ring slot 0 (the prefill's
    // screened head).
    if (!first_queued_) {
        set_ints(d_count(), 0, 0, s_);
        argmax_token(logits1_.as<float>(), V_, argpart_.as<float>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, false,
                     s_, fold_emb(), x1_.as<float>());
    }
    first_queued_ = false;
    QASR_CUDA(cudaEventRecord(ev_[0], s_));
    for (int n = 0; n < max_tokens; ++n) {
        if (n + 1 < max_tokens) { // queue the step that makes token n+1 before reading token n
            launch_step(true); // only the token is read back: the screened head where the model has one
            QASR_CUDA(cudaEventRecord(ev_[(n + 1) % kRing], s_));
        }
        if (n == 0) capture_pending(); // this request's eager passes, recorded while the device decodes
        QASR_CUDA(cudaEventSynchronize(ev_[n % kRing]));
        int id = 0;
        float lp = 0;
        if (!read_ring(n, &id, &lp)) {
            QASR_CUDA(cudaStreamSynchronize(s_));
            fail("decoder", "no valid token at step " + std::to_string(n) + " (non-finite logits: check the checkpoint's weights)");
        }
        ++len_;
        if (!take(id, lp)) {
            unwaited_ = n + 1 < max_tokens; // the step queued past the stop: the session's next use waits for it
            return;
        }
    }
}

} // namespace detail

} // namespace qasr::cuda
