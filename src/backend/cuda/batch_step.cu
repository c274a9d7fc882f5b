// Batched decoding across requests on the device (DeviceBatch): CudaSession's batch members — the first token and
// KV room of a row's session (batch_first), the batched step over rows of many sessions (init_rows, step_rows and
// the kernels it queues), a row alone through its session's own step graph (step_greedy) — and CudaBatch, which
// runs the steps on a session of its own.
#include "backend/cuda/cuda_session.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace qasr::cuda::detail {

void CudaSession::batch_first(int max_tokens, int* id, float* logprob) {
    settle();
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (len_ <= 0) fail("decoder", "batch_first() before prefill()");
    if (max_tokens < 1) fail("decoder", "batch_first() needs room for at least one token");
    join_capture();
    ensure_kv(len_ + max_tokens + 1); // the batched steps write at len_ … (one step may run past a stop)
    if (!first_queued_) { // as greedy(): the prefill's logits → ring slot 0
        set_ints(d_count(), 0, 0, s_);
        argmax_token(logits1_.as<float>(), V_, argpart_.as<float>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, false,
                     s_, fold_emb(), x1_.as<float>());
    }
    first_queued_ = false;
    QASR_CUDA(cudaStreamSynchronize(s_));
    if (!read_ring(0, id, logprob)) fail("decoder", "no valid first token (non-finite logits: check the checkpoint's weights)");
    capture_pending(); // this request's eager passes, recorded while its tokens are decoded in batches
}

void CudaSession::init_rows(int max_batch) {
    settle();
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (max_batch < 1 || max_batch > BatchRows::kMax)
        fail("cuda", "a batched step holds 1.." + std::to_string(BatchRows::kMax) + " rows");
    rows_max_ = max_batch;
    const size_t n = size_t(max_batch);
    px_.ensure(n * D_ * 4);
    pbf_.ensure(n * std::max({D_, Hq_ * hd_, I_}) * 2);
    pqkv_.ensure(n * qkvw_ * 4);
    pq_.ensure(n * Hq_ * hd_ * 4);
    po_.ensure(n * Hq_ * hd_ * 4);
    pgu_.ensure(n * 2 * I_ * 4);
    plog_.ensure(n * V_ * 4);
    rows_part_.ensure(n * Hq_ * std::max(kDecodeSplits * decode_partial_floats(hd_), kRowsSplits * (hd_ + 2)) * 4);
    rows_counter_.ensure(n * Hkv_ * sizeof(unsigned));
    QASR_CUDA(cudaMemset(rows_counter_.get(), 0, n * Hkv_ * sizeof(unsigned)));
    rows_arg_.ensure(n * 3 * kArgRowParts * 4);
    rows_d_.ensure(sizeof(BatchRows));
    rows_out_d_.ensure(n * sizeof(int2));
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&rows_h_), sizeof(BatchRows), cudaHostAllocDefault));
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&rows_out_h_), n * sizeof(int2), cudaHostAllocDefault));
    std::memset(rows_h_, 0, sizeof(BatchRows));
    const char* e = std::getenv("QASR_CUDA_ROWS_MMA");
    // the weights' formats and widths (a step of more rows than the row products take runs the cuBLAS path)
    rows_fast_ = !(e && std::string(e) == "0") && rows_product_applies(w_.head, 1, Epi::Store);
    for (const DevDecLayer& l : w_.dec)
        rows_fast_ = rows_fast_ && rows_product_applies(l.qkv, 1, Epi::Store) && rows_product_applies(l.o, 1, Epi::Add) &&
                     rows_product_applies(l.gateup, 1, Epi::SwiGLU) && rows_product_applies(l.down, 1, Epi::Add);
}

void CudaSession::queue_rows_fast(int B, int splits, const BatchRows* rows) {
    const float eps = m_.hp.text.rms_eps;
    float* x = px_.as<float>();
    float* o = po_.as<float>();
    float* h = pgu_.as<float>();
    const auto product = [&](const DMat& W, const float* in, const float* norm, float* y, int ldy, Epi epi) {
        if (!rows_product(W, in, B, norm, eps, y, ldy, epi, s_)) fail("cuda", "a batched step's product does not fit the row kernel");
    };
    if (profile_) ++prof_calls_["batch" + std::to_string(B)], npev_ = 0, mark("start");
    for (size_t li = 0; li < w_.dec.size(); ++li) {
        const DevDecLayer& l = w_.dec[li];
        product(l.qkv, x, l.in_norm, pqkv_.as<float>(), int(qkvw_), Epi::Store);
        mark("qkv");
        const RowsKv rk{rows, int(li)};
        if (!queue_rows_attention(li, B, splits, rows, s_)) {
            qk_norm_rope_kv(pqkv_.as<float>(), B, nullptr, Hq_, Hkv_, hd_, l.q_norm, l.k_norm, eps, w_.inv_freq,
                            pq_.as<float>(), nullptr, nullptr, s_, rk);
            AttnArgs at = dec_attn(li, pq_.as<float>(), o, B);
            at.splits = kRowsSplits;
            at.part = rows_part_.as<float>();
            attention(at, s_, rk);
        }
        mark("attention");
        product(l.o, o, nullptr, x, D_, Epi::Add);
        mark("o");
        product(l.gateup, x, l.post_norm, h, I_, Epi::SwiGLU);
        mark("gateup");
        product(l.down, h, nullptr, x, D_, Epi::Add);
        mark("down");
    }
    product(w_.head, x, w_.norm, plog_.as<float>(), V_, Epi::Store);
}

bool CudaSession::queue_rows_attention(size_t li, int B, int splits, const BatchRows* rows, cudaStream_t s) {
    if (!fused_attn_) return false;
    const DevDecLayer& l = w_.dec[li];
    DecAttnArgs da;
    da.qkv = pqkv_.as<float>(), da.Hq = Hq_, da.Hkv = Hkv_, da.hd = hd_;
    da.qn = l.q_norm, da.kn = l.k_norm, da.eps = m_.hp.text.rms_eps, da.inv_freq = w_.inv_freq;
    da.o = po_.as<float>(), da.splits = splits, da.part = rows_part_.as<float>(), da.counter = rows_counter_.as<unsigned>();
    const RowsKv rk{rows, int(li)};
    if (!rows_attn_ || !rows_attention(da, rk, B, s)) decode_attention_rows(da, rk, B, s);
    return true;
}

void CudaSession::step_greedy(int token, int* id, float* logprob) {
    settle();
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (token < 0 || token >= vocab_) fail("decoder", "token id " + std::to_string(token) + " is outside the vocabulary");
    if (len_ <= 0 || len_ + 1 > cap_) fail("decoder", "a batched step for a session without room (batch_first() first)");
    first_queued_ = false;
    *tok_h_ = token;
    QASR_CUDA(cudaMemcpyAsync(d_tok(), tok_h_, sizeof(int), cudaMemcpyHostToDevice, s_));
    set_ints(d_pos(), int(len_), 0, s_); // position (batched steps do not advance it on the device); ring slot 0
    if (embed_fold_) embed(w_.embed, d_tok(), 1, x1_.as<float>(), s_);
    launch_step(true);
    QASR_CUDA(cudaStreamSynchronize(s_));
    if (!read_ring(0, id, logprob)) fail("decoder", "no valid token (non-finite logits: check the checkpoint's weights)");
    ++len_;
}

void CudaSession::enqueue_rows_step(int B, int splits) {
    QASR_CUDA(cudaMemcpyAsync(rows_d_.get(), rows_h_, sizeof(BatchRows), cudaMemcpyHostToDevice, s_));
    const BatchRows* rd = rows_d_.as<BatchRows>();
    const int* toks = reinterpret_cast<const int*>(reinterpret_cast<const char*>(rd) + offsetof(BatchRows, tok));
    embed(w_.embed, toks, B, px_.as<float>(), s_);
    const float* lg = plog_.as<float>();
    if (rows_fast_ && B <= kRowsProductMaxRows) {
        queue_rows_fast(B, splits, rd);
    } else {
        queue_decoder_rows(B, 0, rd, splits);
        lg = head_rows(px_.as<float>(), B);
    }
    mark("head");
    rows_lg_ = lg;
    argmax_rows(lg, B, V_, rows_arg_.as<float>(), rows_out_d_.as<int2>(), s_);
    mark("argmax");
    QASR_CUDA(cudaMemcpyAsync(rows_out_h_, rows_out_d_.get(), size_t(B) * sizeof(int2), cudaMemcpyDeviceToHost, s_));
}

void CudaSession::step_rows(CudaSession* const* rows, const int* tokens, int B, int* ids, float* logprobs, int top_k,
                            int* top_ids, float* top_lps) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (B <= 0) return;
    settle();
    for (int b = 0; b < B; ++b) rows[b]->settle(); // their KV caches are written on this stream
    if (!rows_h_ || B > rows_max_) fail("cuda", "a batched step of " + std::to_string(B) + " rows (this batch holds " +
                                                    std::to_string(rows_max_) + ")");
    int64_t longest = 0;
    for (int b = 0; b < B; ++b) {
        const CudaSession& r = *rows[b];
        longest = std::max(longest, r.len_);
        if (&r.w_ != &w_) fail("cuda", "a batched step needs sessions of one model on one device");
        if (tokens[b] < 0 || tokens[b] >= vocab_) fail("decoder", "token id " + std::to_string(tokens[b]) + " is outside the vocabulary");
        if (top_k > 0 && r.len_ > 0 && r.len_ + 1 > r.cap_) { // beam sessions grow step by step
            rows[b]->join_capture(); // its recording thread reads the buffers ensure_kv moves
            rows[b]->ensure_kv(r.len_ + 1);
        }
        if (r.len_ <= 0 || r.len_ + 1 > r.cap_) fail("decoder", "a batched step for a session without room (batch_first() first)");
        rows_h_->tok[b] = tokens[b];
        rows_h_->pos[b] = int(r.len_);
        rows_h_->kv[b] = r.kv_.as<float>();
        rows_h_->cap[b] = r.cap_;
    }
    // what the captured graphs point at; the scratch was sized by init_rows, so only the dequantization buffer
    // (quantized weights: sized by the first eager step) can move
    const std::array<const void*, 10> key{px_.get(), pbf_.get(), pqkv_.get(), pq_.get(), po_.get(), pgu_.get(),
                                          plog_.get(), deq_.get(), rows_part_.get(), rows_arg_.get()};
    if (key != rows_key_) {
        QASR_CUDA(cudaStreamSynchronize(s_));
        for (auto& [n, g] : rows_graphs_) QASR_CUDA(cudaGraphExecDestroy(g));
        rows_graphs_.clear();
        rows_seen_.clear();
        rows_key_ = key;
    }
    // the attention's key splits, by the longest row's keys (rows_attention splits none: one graph per row count)
    const bool split_free = fused_attn_ && rows_attn_ && rows_attention_applies(Hq_, Hkv_, hd_);
    const int splits = split_free ? 1 : splits_for(longest + 1);
    const int gkey = B * 64 + splits;
    auto it = rows_graphs_.find(gkey);
    if (it != rows_graphs_.end()) {
        QASR_CUDA(cudaGraphLaunch(it->second, s_));
    } else if (rows_seen_[gkey]++ == 0 || profile_) { // the first step of a shape eagerly: plans made, kernels loaded
        enqueue_rows_step(B, splits);
        rows_flush(("batch" + std::to_string(B)).c_str()); // QASR_CUDA_PROFILE: per kernel group (every step eager then)
    } else {
        const cudaGraphExec_t g = capture([&] { enqueue_rows_step(B, splits); });
        rows_graphs_.emplace(gkey, g);
        QASR_CUDA(cudaGraphLaunch(g, s_));
    }
    const size_t nt = size_t(B) * size_t(top_k);
    if (top_k > 0) { // beam search: each row's best continuations, chosen here; B·k pairs come back, not B·V logits
        if (top_k > 64) fail("cuda", "a batched step's top-k holds at most 64 per row");
        const size_t tb = size_t(rows_max_) * 64 * 8;
        top_scratch_.ensure(row_topk_scratch_floats(rows_max_, 64) * 4);
        top_out_d_.ensure(tb);
        if (!top_out_h_) QASR_CUDA(cudaHostAlloc(&top_out_h_, tb, cudaHostAllocDefault));
        int* d_ids = top_out_d_.as<int>();
        float* d_lps = reinterpret_cast<float*>(d_ids + nt);
        row_topk(rows_lg_, B, V_, top_k, top_scratch_.as<float>(), d_ids, d_lps, s_);
        QASR_CUDA(cudaMemcpyAsync(top_out_h_, d_ids, nt * 8, cudaMemcpyDeviceToHost, s_));
    }
    QASR_CUDA(cudaStreamSynchronize(s_));
    if (top_k > 0) {
        std::memcpy(top_ids, top_out_h_, nt * 4);
        std::memcpy(top_lps, static_cast<const char*>(top_out_h_) + nt * 4, nt * 4);
    }
    for (int b = 0; b < B; ++b) {
        const int2 v = rows_out_h_[b];
        if (v.x < 0 || v.x >= V_)
            fail("decoder", "no valid token in a batched step (non-finite logits: check the checkpoint's weights)");
        ids[b] = v.x;
        std::memcpy(&logprobs[b], &v.y, 4);
        ++rows[b]->len_;
    }
}

// The batched step runs on a session of its own (stream, cuBLAS handle, scratch for max_batch rows, graphs by B).
namespace {

class CudaBatch final : public DeviceBatch {
public:
    CudaBatch(const Model& m, const DeviceWeights& w, int max_batch)
        : max_(std::clamp(max_batch, 1, BatchRows::kMax)), s_(std::make_unique<CudaSession>(m, w)) {
        s_->init_rows(max_);
    }
    int max_batch() const override { return max_; }
    void step(DeviceSession* const* s, const int* tokens, size_t B, int* ids, float* logprobs) override {
        rows_.resize(B); // (more rows than the batch holds: step_rows refuses them)
        for (size_t b = 0; b < B; ++b) {
            rows_[b] = dynamic_cast<CudaSession*>(s[b] ? s[b]->inner() : nullptr);
            if (!rows_[b]) fail("cuda", "a batched step needs sessions of this CUDA context");
        }
        if (B == 1 && solo_) return rows_[0]->step_greedy(tokens[0], ids, logprobs); // its own step graph: faster
        s_->step_rows(rows_.data(), tokens, int(B), ids, logprobs);
    }
    void step_top(DeviceSession* const* s, const int* tokens, size_t B, int k, int* ids, float* logprobs) override {
        rows_.resize(B);
        for (size_t b = 0; b < B; ++b) {
            rows_[b] = dynamic_cast<CudaSession*>(s[b] ? s[b]->inner() : nullptr);
            if (!rows_[b]) fail("cuda", "a batched step needs sessions of this CUDA context");
        }
        ids_.resize(B);
        lps_.resize(B);
        s_->step_rows(rows_.data(), tokens, int(B), ids_.data(), lps_.data(), k, ids, logprobs);
    }

private:
    int max_;
    std::unique_ptr<CudaSession> s_;
    std::vector<CudaSession*> rows_;
    std::vector<int> ids_;
    std::vector<float> lps_;
    const bool solo_ = [] { // QASR_CUDA_BATCH_SOLO=0: a batch of one row through the batched step too (A/B, tests)
        const char* e = std::getenv("QASR_CUDA_BATCH_SOLO");
        return !(e && std::string(e) == "0");
    }();
};

} // namespace

std::unique_ptr<DeviceBatch> open_batch(const Model& m, const DeviceWeights& w, int max_batch) {
    return std::make_unique<CudaBatch>(m, w, max_batch);
}

} // namespace qasr::cuda::detail
