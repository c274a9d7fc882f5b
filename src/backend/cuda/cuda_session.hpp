// The CUDA backend's per-session engine (internal to backend/cuda): encoder (cuda_encoder.cu), prefill, decode
// steps and the greedy loop with a captured step graph and one-step-behind readback (cuda_session.cu).
#pragma once
#include "backend/cuda/check.hpp"
#include "backend/cuda/decode_persistent.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/device.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "model/model.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <string>
#include <vector>

namespace qasr::cuda::detail {

constexpr int kRing = 4;
constexpr int kArgParts = 1024; // argmax partials the LM head may write (lm_head_argmax: two per SM)
constexpr int kDecodeSplits = 32; // most key splits of the decode attention (QASR_CUDA_DEC_SPLITS; by default splits_for the context)

class CudaSession final : public DeviceSession {
public:
    CudaSession(const Model& m, const DeviceWeights& w) : m_(m), w_(w) {
        QASR_CUDA(cudaSetDevice(w.ordinal));
        matvec_prefetch_prepare(w.ordinal);
        QASR_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
        qs_ = s_;
        QASR_CUBLAS(cublasCreate(&blas_));
        QASR_CUBLAS(cublasSetStream(blas_, s_));
        gemm_ = std::make_unique<GemmPlans>(blas_, s_);
        for (auto& e : ev_) QASR_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring_h_), sizeof(int2) * kRing, cudaHostAllocMapped));
        QASR_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ring_d_), ring_h_, 0));
        QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&tok_h_), sizeof(int), cudaHostAllocDefault));
        ints_.alloc(4 * sizeof(int));
        const TextHParams& t = m.hp.text;
        D_ = t.hidden, Hq_ = t.n_heads, Hkv_ = t.n_kv_heads, hd_ = t.head_dim, I_ = t.intermediate, V_ = int(w_.head.rows), vocab_ = t.vocab_size;
        kvrow_ = int64_t(Hkv_) * hd_;
        qkvw_ = int64_t(Hq_ + 2 * Hkv_) * hd_;
        x1_.alloc(size_t(D_) * 4);
        qkv1_.alloc(size_t(qkvw_) * 4);
        q1_.alloc(size_t(Hq_) * hd_ * 4);
        o1_.alloc(size_t(Hq_) * hd_ * 4);
        h1_.alloc(size_t(I_) * 4);
        logits1_.alloc(size_t(V_) * 4);
        part_.alloc(size_t(Hq_) * kDecodeSplits * decode_partial_floats(hd_) * 4); // ≥ attention.cu's hd + 2 too
        counter_.alloc(size_t(Hkv_) * sizeof(unsigned));
        const char* dsp = std::getenv("QASR_CUDA_DEC_SPLITS");
        dec_splits_fixed_ = dsp && std::atoi(dsp) > 0 ? std::clamp(std::atoi(dsp), 1, kDecodeSplits) : 0;
        dec_splits_ = dec_splits_fixed_ ? dec_splits_fixed_ : 16;
        QASR_CUDA(cudaMemset(counter_.get(), 0, size_t(Hkv_) * sizeof(unsigned)));
        const char* ef = std::getenv("QASR_CUDA_EMBED_FOLD");
        embed_fold_ = !(ef && std::string(ef) == "0") && argmax_can_embed(w_.embed);
        const char* fa = std::getenv("QASR_CUDA_FUSED_ATTN");
        fused_attn_ = decode_attention_supported(Hq_, Hkv_, hd_) && !(fa && std::string(fa) == "0");
        // The whole step as one persistent kernel where it applies (bf16 weights, sm_90); QASR_CUDA_PERSISTENT=0
        // keeps the per-layer kernels, =1 asks for the persistent one.
        const char* pp = std::getenv("QASR_CUDA_PERSISTENT");
        persistent_ = pp && std::string(pp) == "1" && persistent_step_supported(w.ordinal, D_, Hq_, Hkv_, hd_, I_) &&
                      w_.embed.bits == 16 && w_.head.bits == 16;
        for (const DevDecLayer& l : w_.dec)
            persistent_ = persistent_ && l.qkv.bits == 16 && l.o.bits == 16 && l.gateup.bits == 16 && l.down.bits == 16;
        if (persistent_) {
            plaunch_ = persistent_step_plan(w.ordinal, int(w_.dec.size()), D_, Hq_, hd_, I_);
            const char* pf = std::getenv("QASR_CUDA_PERSIST_PROFILE");
            if (pf && std::string(pf) == "1") {
                pprof_.alloc(24 * sizeof(unsigned long long));
                QASR_CUDA(cudaMemset(pprof_.get(), 0, 24 * sizeof(unsigned long long)));
            }
            players_.alloc(w_.dec.size() * sizeof(PersistLayer));
            const char* ps = std::getenv("QASR_CUDA_PERSIST_SPLITS");
            psplits_ = std::clamp(ps ? std::atoi(ps) : 8, 1, kDecodeSplits);
        }
        argpart_.alloc(size_t(3) * std::max({plaunch_.grid, 256, kArgParts}) * 4);
        if (w_.head_screen) {
            plog_screen_.alloc(size_t(V_) * 4);
            xpart_.alloc(size_t(3) * kArgParts * 4);
            hrec_.alloc(size_t(8) * kArgParts * 4);
            hcounter_.alloc(sizeof(unsigned));
            QASR_CUDA(cudaMemset(hcounter_.get(), 0, sizeof(unsigned)));
            const char* ss = std::getenv("QASR_CUDA_SCREEN_STATS");
            if (ss && std::string(ss) == "1") {
                screen_stats_.alloc(sizeof(unsigned));
                QASR_CUDA(cudaMemset(screen_stats_.get(), 0, sizeof(unsigned)));
            }
        }
#ifdef QASR_CUDA_TIMELINE
        tl_.alloc(sizeof(detail::Timeline));
        QASR_CUDA(cudaMemset(tl_.get(), 0, sizeof(detail::Timeline)));
        timeline_bind_kernels(tl_.get());
        timeline_bind_prefetch(tl_.get());
        timeline_bind_attention(tl_.get());
        timeline_bind_head(tl_.get());
        timeline_bind_screen(tl_.get());
#endif
        const char* pe = std::getenv("QASR_CUDA_PROFILE");
        profile_ = pe && *pe && std::string(pe) != "0";
        if (profile_)
            for (auto& e : pev_) QASR_CUDA(cudaEventCreate(&e));
    }
    ~CudaSession() override {
        cudaSetDevice(w_.ordinal);
        join_capture();
        cudaStreamSynchronize(s_);
        if (profile_ && prof_steps_) {
            std::fprintf(stderr, "qasr cuda profile: %d decode steps (eager, one event per kernel group), us per step:\n", prof_steps_);
            double tot = 0;
            for (const auto& [k, v] : prof_) tot += v;
            for (const auto& [k, v] : prof_)
                std::fprintf(stderr, "  %-14s %8.1f us  (%4.1f%%)\n", k.c_str(), 1000.0 * v / prof_steps_, 100.0 * v / tot);
            std::fprintf(stderr, "  %-14s %8.1f us\n", "total", 1000.0 * tot / prof_steps_);
        }
        if (profile_ && !prof_rows_.empty()) {
            std::fprintf(stderr, "qasr cuda profile: row passes (an event after each kernel group), ms per call:\n");
            for (const auto& [k, v] : prof_rows_) {
                const int n = prof_calls_[k.substr(0, k.find('/'))];
                std::fprintf(stderr, "  %-22s %8.3f ms\n", k.c_str(), v / std::max(1, n));
            }
        }
        if (profile_)
            for (auto& e : pev_) cudaEventDestroy(e);
        if (pprof_.get()) {
            unsigned long long h[24] = {};
            if (cudaMemcpy(h, pprof_.get(), sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[14]) {
                static const char* names[] = {"stage+qkv", "sync", "attention", "sync", "merge", "o-proj", "sync",
                                              "stage+gate/up", "sync", "stage+down", "sync", "head", "sync+argmax"};
                std::fprintf(stderr, "qasr persistent step profile: %llu steps, block 0, us per step:\n", h[14]);
                double tot = 0;
                for (int k = 0; k < 13; ++k) tot += double(h[k]);
                for (int k = 0; k < 13; ++k)
                    std::fprintf(stderr, "  %2d %-14s %8.1f us (%4.1f%%)\n", k, names[k], 1e-3 * double(h[k]) / double(h[14]),
                                 100.0 * double(h[k]) / tot);
                std::fprintf(stderr, "  total %.1f us; thread 0 in matrix phases (at 1.98 GHz): waits %.1f, dots %.1f, "
                             "epilogues %.1f, issues %.1f us\n", 1e-3 * tot / double(h[14]),
                             double(h[13]) / double(h[14]) / 1980.0, double(h[15]) / double(h[14]) / 1980.0,
                             double(h[16]) / double(h[14]) / 1980.0, double(h[17]) / double(h[14]) / 1980.0);
            }
        }
        unsigned rescored = 0;
        if (screen_stats_.get() && screen_steps_ &&
            cudaMemcpy(&rescored, screen_stats_.get(), sizeof rescored, cudaMemcpyDeviceToHost) == cudaSuccess)
            std::fprintf(stderr, "qasr cuda: screened head: %u rows rescored over %ld steps (%.1f per step)\n", rescored,
                         long(screen_steps_), double(rescored) / double(screen_steps_));
#ifdef QASR_CUDA_TIMELINE
        print_timeline();
#endif
        for (auto& [n, g] : graphs_) cudaGraphExecDestroy(g);
        for (auto& [k, g] : pass_graphs_) cudaGraphExecDestroy(g);
        for (auto& [k, g] : rows_graphs_) cudaGraphExecDestroy(g);
        if (rows_h_) cudaFreeHost(rows_h_);
        if (rows_out_h_) cudaFreeHost(rows_out_h_);
        if (top_out_h_) cudaFreeHost(top_out_h_);
        for (auto& e : ev_) cudaEventDestroy(e);
        cudaFreeHost(ring_h_);
        cudaFreeHost(tok_h_);
        gemm_.reset();
        cublasDestroy(blas_);
        if (cs_) cudaStreamDestroy(cs_);
        cudaStreamDestroy(s_);
    }

    Tensor encode(const Tensor& mel) override;
    Tensor encode_audio(const std::vector<float>& audio, size_t min_samples, double* mel_ms) override;
    Tensor prefill(const std::vector<int>& ids, int64_t audio_begin, const Tensor& rows, int logits) override;
    int64_t encode_audio_resident(const std::vector<float>& audio, size_t min_samples, double* mel_ms) override;
    void prefill_resident(const std::vector<int>& ids, int64_t audio_begin) override;
    void reserve_kv(int64_t positions) override;
    // Device memory in the buffers that grow with a request's length (KV cache, prefill and encoder scratch): what
    // the pool weighs against its limit.
    size_t scaling_bytes() const;
    Tensor step(int token) override;
    void greedy(int max_tokens, const std::function<bool(int, float)>& take) override;
    Tensor encode_stem(const Tensor& mel) override;
    Tensor encode_rows(const Tensor& x, int64_t window_rows) override;
    int64_t length() const override { return len_; }
    void truncate(int64_t n) override { len_ = std::max<int64_t>(0, std::min(len_, n)); }
    void extend(const Tensor& x) override;
    Tensor extended_logits(int64_t r0, int64_t n) override;
    void record_passes(bool on) override { record_ = on; }
    void batch_first(int max_tokens, int* id, float* logprob) override;
    void copy_cache(DeviceSession& src, int64_t from) override;

    // The batched greedy step (CudaBatch, open_batch) on this session's stream, scratch and cuBLAS handle: row b is
    // session rows[b] fed tokens[b] at its length (the rows' own KV caches get their keys and values, their
    // lengths advance); ids/logprobs get each row's greedy choice. init_rows sizes the scratch for max_batch rows
    // once (the captured step graphs keep their pointers).
    void init_rows(int max_batch);
    // One greedy step of this session alone for `token` at its length, through its captured step graph (the
    // screened head where the model has one): a batch of one row (0.6B bf16, H200: ~0.6 ms against ~1 ms).
    void step_greedy(int token, int* id, float* logprob);
    // top_k > 0 (beam search): the rows' sessions get KV room as they grow, and top_ids/top_lps (host, [B, top_k])
    // get each row's top_k best tokens and log-probabilities (row_topk) after the step.
    void step_rows(CudaSession* const* rows, const int* tokens, int B, int* ids, float* logprobs, int top_k = 0,
                   int* top_ids = nullptr, float* top_lps = nullptr);

    // The end of a request (Pooled gives the session back), whether it succeeded or failed: the stream may still hold
    // queued work (the step queued past a greedy stop, a failed request's leftovers). Nothing waits for it here —
    // the session's next use does (settle()) — so the request's caller is not held up by a step whose token nobody
    // reads (~0.6 ms for 0.6B on the H200).
    void end_request() noexcept {
        cudaSetDevice(w_.ordinal);
        join_capture();
        resident_ = -1; // a later request must encode its own rows
        first_queued_ = false;
        // an interrupted fused head's arrivals, cleared after whatever is queued
        if (hcounter_.get()) cudaMemsetAsync(hcounter_.get(), 0, sizeof(unsigned), s_);
        cudaGetLastError();
        unwaited_ = true;
    }

private:
    // Work queued on the stream that the host has not waited for (unwaited_: greedy()'s step past a stop, or a
    // request's end). Every entry point settles first: the host buffers a call rewrites (the token, the batch's rows),
    // KV caches other streams read and buffers that move are then free. An error of that work is the ended request's:
    // it is cleared here as the pool did at a request's end (a sticky one fails the next call anyway).
    void settle() noexcept {
        if (!unwaited_) return;
        unwaited_ = false;
        cudaSetDevice(w_.ordinal);
        cudaStreamSynchronize(s_);
        cudaGetLastError();
    }
    // Ring slot i as the device wrote it (page-locked, mapped: read after the event/stream that wrote it): the
    // token and its log-probability; false where the token is not valid (non-finite logits).
    bool read_ring(int i, int* id, float* logprob) const {
        const volatile int* slot = reinterpret_cast<volatile int*>(ring_h_ + i % kRing);
        const int tok = slot[0], lp_bits = slot[1];
        *id = tok;
        std::memcpy(logprob, &lp_bits, 4);
        return tok >= 0 && tok < V_;
    }
    int* d_tok() const { return ints_.as<int>(); }
    int* d_pos() const { return ints_.as<int>() + 1; }
    int* d_count() const { return ints_.as<int>() + 2; }
    float* kc(size_t l) const { return kv_.as<float>() + (2 * l) * size_t(cap_ * kvrow_); }
    float* vc(size_t l) const { return kv_.as<float>() + (2 * l + 1) * size_t(cap_ * kvrow_); }
    void ensure_kv(int64_t need);
    // Causal attention of n query rows (q, o: [n, Hq·hd]) over layer li's KV cache, from position 0.
    AttnArgs dec_attn(size_t li, const float* q, float* o, int n) const {
        AttnArgs a;
        a.q = q;
        a.q_stride = a.o_stride = Hq_ * hd_;
        a.k = kc(li);
        a.v = vc(li);
        a.kv_stride = int(kvrow_);
        a.o = o;
        a.n = n;
        a.heads = Hq_;
        a.kv_heads = Hkv_;
        a.hd = hd_;
        return a;
    }
    // One step on the stream; screened: the greedy choice through the screened head (w_.head_screen), whose
    // logits1_ are not the step's logits (greedy() only; step() returns logits).
    void enqueue_step(bool screened);
    void launch_step(bool screened);
    // enqueue_step() with that many key splits, captured and instantiated
    cudaGraphExec_t capture_step(int splits, bool screened);
    cudaGraphExec_t capture(const std::function<void()>& enqueue); // what enqueue queues on s_, instantiated
    void gemm_w(const bf16* A, int M, const DMat& W, float* C, float beta);
    Tensor encode_device(const float* d_mel, int T); // mel [n_mels, T] already on the device
    int stem_device(const float* d_mel, int T, int* window); // conv stem of every chunk → ex_ rows; returns A
    static constexpr int kStemGroup = 32; // chunks through the conv stem at once (stem_device)
    Tensor encode_layers(int A, int window);         // stem rows [A, d] in ex_ → projector rows on the host
    void queue_layers(int A, int window);            // the same, the projector rows left in eout_ [A, D]
    // log-mel → emel_; wait: mel_ms is the front end's time on the device (else the time to queue it)
    void queue_front(const std::vector<float>& audio, size_t min_samples, double* mel_ms, int* T, bool wait = true);
    // The request's audio copied to the device and the front end's buffers sized: the mel frame count.
    int upload_audio(const std::vector<float>& audio, size_t min_samples);
    // The log-mel of the uploaded audio (n_have samples, zeros up to N) into emel_, on qs_.
    void queue_mel(int64_t n_have, int64_t N, int T);
    // prefill() with the A audio rows at src (host memory, or the device's eout_ when on_device)
    Tensor prefill_rows(const std::vector<int>& ids, int64_t audio_begin, int64_t A, const float* src, bool on_device, int logits);
    // The decoder layers over n input rows in px_ at positions len_ … len_+n-1 (the KV cache holds the earlier
    // ones); then len_ += n and the device position follows.
    void decoder_rows(int n);
    // decoder_rows' kernels at positions pos0… (buffers sized beforehand); with rows (a batched step, device
    // memory), row r is at rows->pos[r] of its own session's KV cache, pos0 is unused and the attention is
    // queue_rows_attention's (`splits` key splits) where it applies
    void queue_decoder_rows(int n, int64_t pos0, const BatchRows* rows = nullptr, int splits = 0);
    // A batched step's kernels for B rows, described by rows_h_ (page-locked; copied to the device first), the
    // attention's keys in `splits` splits (fused attention)
    void enqueue_rows_step(int B, int splits);
    // Its decoder layers and LM head on the tensor-core row products (rows_product: 5 kernels per layer, bf16
    // weights, B ≤ 16); else (rows_fast_ false, more rows, or QASR_CUDA_ROWS_MMA=0) the row passes' cuBLAS path.
    void queue_rows_fast(int B, int splits, const BatchRows* rows);
    // The B rows' decode attention of layer li (q/k-norm + RoPE + each row's KV write + attention; rows in device
    // memory) into po_ as float32: rows_attention, or (QASR_CUDA_ROWS_ATTN=0, other head shapes) the fused
    // single-row kernel per row when fused_attn_ (`splits` key splits). False where neither applies.
    bool queue_rows_attention(size_t li, int B, int splits, const BatchRows* rows, cudaStream_t s);
    bool rows_fast_ = false;
    const bool rows_attn_ = [] { // QASR_CUDA_ROWS_ATTN=0: the fused single-row kernel per row instead (A/B)
        const char* e = std::getenv("QASR_CUDA_ROWS_ATTN");
        return !(e && std::string(e) == "0");
    }();
    static constexpr int kRowsSplits = 8; // key splits of the cuBLAS path's attention (per row and head)
    int rows_max_ = 0;
    BatchRows* rows_h_ = nullptr; // page-locked
    int2* rows_out_h_ = nullptr;  // page-locked: {id, logprob bits} per row
    const float* rows_lg_ = nullptr; // where the batched step leaves its rows' logits (plog_ or head_rows' buffer)
    Buffer top_scratch_, top_out_d_;  // row_topk's partials; its ids and log-probabilities [B, 64] each
    void* top_out_h_ = nullptr;       // page-locked copy of top_out_d_
    Buffer rows_d_, rows_out_d_, rows_part_, rows_counter_, rows_arg_;
    std::map<int, cudaGraphExec_t> rows_graphs_; // by B·64 + splits, for rows_key_'s buffers
    std::map<int, int> rows_seen_;               // the same key → steps run eagerly (captured on the second)
    std::array<const void*, 10> rows_key_{};
    int stem_rows(int T, int* window) const; // the conv stem's output rows for T mel frames, its attention window

    // Row passes (a greedy transcription's encoder, the prefill) replayed as CUDA graphs, so that the host queues a
    // pass of ~170 / ~260 kernels in one call. A pass is keyed by its shape and every buffer it touches. The first time
    // a key is seen it runs eagerly (sizing the buffers); the greedy loop of that request then records the pass into a
    // graph on a second host thread and stream (capture_pending, while the device decodes and the host would only wait),
    // and later requests of that key launch the graph. No request waits for a capture (session 12's capture on the
    // key's second sighting cost that request 3–15 ms), except one that starts before the capture of the previous
    // request's passes is done (a decode shorter than the capture). At most kPassGraphs graphs. On by default;
    // QASR_CUDA_PASS_GRAPHS=0: eager always.
    struct PassKey {
        int kind, rows;
        int64_t a, b;
        std::array<const void*, 14> ptr;
        bool operator<(const PassKey& o) const {
            return std::tie(kind, rows, a, b, ptr) < std::tie(o.kind, o.rows, o.a, o.b, o.ptr);
        }
        bool operator==(const PassKey& o) const { return !(*this < o) && !(o < *this); }
    };
    // key(): the pass's key from the session's state now (a pass whose buffers moved since is not recorded).
    void run_pass(const PassKey& key, std::function<PassKey()> key_now, std::function<void()> enqueue);
    void capture_pending(); // start recording the pending passes (greedy(), after its first step is queued)
    void join_capture() noexcept; // wait for the recording thread; its graphs join pass_graphs_
    static constexpr size_t kPassGraphs = 16;
    std::map<PassKey, cudaGraphExec_t> pass_graphs_;
    struct PendingPass {
        PassKey key;
        std::function<PassKey()> key_now;
        std::function<void()> enqueue;
    };
    std::vector<PendingPass> pending_;                             // passes run eagerly, not yet recorded
    std::vector<std::pair<PassKey, cudaGraphExec_t>> recorded_;    // the recording thread's graphs (read after join)
    std::thread capw_;                                              // the recording thread
    cudaStream_t cs_ = nullptr;                                     // its stream
    cudaStream_t qs_ = nullptr; // the stream the row passes queue on: s_, or cs_ while the recording thread runs them
    bool record_ = true; // record_passes()
    const bool pass_graphs_on_ = [] {
        const char* e = std::getenv("QASR_CUDA_PASS_GRAPHS");
        return !(e && std::string(e) == "0");
    }();
    // Logits [n, V] on the device (in plog_) of n final-normed rows of x (bf16 rows through cuBLAS).
    const float* head_rows(const float* x, int n);
    int ext_rows_ = 0; // rows of the last extend() (their final hidden state is in px_)
#ifdef QASR_CUDA_TIMELINE
    Buffer tl_;
    void print_timeline() {
        auto T = std::make_unique<detail::Timeline>();
        if (cudaMemcpy(T.get(), tl_.get(), sizeof *T, cudaMemcpyDeviceToHost) != cudaSuccess || T->steps < 2) return;
        static const char* kinds[] = {"embed", "matvec", "matvec_pf", "dec_attn", "argmax_part", "argmax_final"};
        const double n = T->steps;
        std::fprintf(stderr, "qasr cuda timeline: %d steps; per kernel of the step, us: critical path (its wait → the "
                     "next kernel's), launched ahead (entry → wait), weights late (wait → weights in shared memory)\n",
                     T->steps);
        double tot = 0;
        for (int i = 0; i < detail::Timeline::kSlots && (i == 0 || T->lead[i]); ++i) {
            tot += T->crit[i] / n;
            std::fprintf(stderr, "  %3d %-12s %7.2f %7.2f %7.2f\n", i, kinds[T->kind[i] % 6], 1e-3 * T->crit[i] / n,
                         1e-3 * T->lead[i] / n, 1e-3 * T->late[i] / n);
        }
        std::fprintf(stderr, "  total critical path %.1f us per step\n", 1e-3 * tot);
    }
#endif
    // QASR_CUDA_SKIP=embed,qkv,attn,o,gateup,down,head (a timing experiment, the tokens are meaningless): the step
    // leaves those kernel groups out, so the difference in ms/token is what they cost inside the captured step.
    bool run(const char* what) const { return skip_.find(std::string(",") + what + ",") == std::string::npos; }
    // QASR_CUDA_ATTN_PRE=0|1 forces the decode attention's order (an A/B switch); default: by the q/k/v product
    int attn_pre_ = [] {
        const char* e = std::getenv("QASR_CUDA_ATTN_PRE");
        return e ? std::atoi(e) : -1;
    }();
    // The decode attention merges its splits inside a thread-block cluster (QASR_CUDA_ATTN_CLUSTER=0: through global
    // memory and a last block). H200, 0.6B, 40 tokens: bf16 0.752 → 0.737 ms/token, 8-bit 1.264 → 1.143.
    const bool attn_cluster_ = [] {
        const char* e = std::getenv("QASR_CUDA_ATTN_CLUSTER");
        return !(e && std::string(e) == "0");
    }();
    // The greedy choice's kernel also writes the chosen token's embedding row into the next step's input, so the
    // step has no embedding kernel of its own (QASR_CUDA_EMBED_FOLD=0: it has; step(token) embeds the given token).
    bool embed_fold_ = false; // set in the constructor
    const DMat* fold_emb() const { return embed_fold_ ? &w_.embed : nullptr; }
    // QASR_CUDA_SAME_LAYER=1 (a timing experiment, the tokens are meaningless): every layer of the decode step uses
    // layer 0's weights, which then stay in L2 — the step's time without streaming its weights from HBM.
    const bool same_layer_ = [] {
        const char* e = std::getenv("QASR_CUDA_SAME_LAYER");
        return e && std::string(e) == "1";
    }();
    // QASR_CUDA_EARLY=qkv,attn,o,gateup,down: those decode-step kernels trigger their successor's launch at entry
    // (its weight copies start one kernel earlier) instead of after their own dependency wait.
    bool early(const char* what) const { return early_.find(std::string(",") + what + ",") != std::string::npos; }
    // A list of kernel groups from the environment, separated by ',' or '+' (scripts/cuda_ab.sh splits variants at
    // commas), as ",a,b," for a find of ",name,".
    static std::string env_groups(const char* var) {
        const char* e = std::getenv(var);
        std::string v = e ? "," + std::string(e) + "," : std::string();
        std::replace(v.begin(), v.end(), '+', ',');
        return v;
    }
    const std::string early_ = env_groups("QASR_CUDA_EARLY");
    const std::string skip_ = env_groups("QASR_CUDA_SKIP");
    void mark(const char* what) {
        if (!profile_ || npev_ >= int(std::size(pev_))) return;
        QASR_CUDA(cudaEventRecord(pev_[npev_], s_));
        pname_[npev_++] = what;
    }
    // Profiling the row passes (prefill, encoder) per op kind: events as in mark(), read at the end of the pass (the
    // host runs ahead of these passes, so the gaps between events are the kernels' own times).
    void rows_flush(const char* pass) {
        if (!profile_) return;
        QASR_CUDA(cudaStreamSynchronize(s_));
        for (int i = 1; i < npev_; ++i) {
            float ms = 0;
            QASR_CUDA(cudaEventElapsedTime(&ms, pev_[i - 1], pev_[i]));
            prof_rows_[std::string(pass) + "/" + pname_[i]] += ms;
        }
        npev_ = 0;
    }
    std::map<std::string, double> prof_rows_;
    std::map<std::string, int> prof_calls_;
    // QASR_CUDA_HOSTTIME=1: per row pass, the host's enqueue time against the time to its completion (stderr), to
    // tell a launch-bound pass from a device-bound one.
    const bool hosttime_ = [] {
        const char* e = std::getenv("QASR_CUDA_HOSTTIME");
        return e && std::string(e) == "1";
    }();
    void host_report(const char* pass, int rows, const Stopwatch& sw) {
        if (!hosttime_) return;
        const double enq = sw.ms();
        QASR_CUDA(cudaStreamSynchronize(s_));
        std::fprintf(stderr, "qasr cuda hosttime: %s %d rows: enqueued %.3f ms, done %.3f ms\n", pass, rows, enq, sw.ms());
    }
    bool profile_ = false;
    cudaEvent_t pev_[640]{};
    const char* pname_[640]{};
    int npev_ = 0, prof_steps_ = 0;
    std::map<std::string, double> prof_;
    Buffer argpart_, mwork_, maudio_;

    const Model& m_;
    const DeviceWeights& w_;
    cudaStream_t s_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    std::unique_ptr<GemmPlans> gemm_; // the row passes' products (cublasLt plans per shape)
    cudaEvent_t ev_[kRing]{};
    int2* ring_h_ = nullptr;
    int2* ring_d_ = nullptr;
    int* tok_h_ = nullptr;
    Buffer ints_;
    int D_ = 0, Hq_ = 0, Hkv_ = 0, hd_ = 0, I_ = 0;
    int V_ = 0, vocab_ = 0; // the head's rows (the vocabulary; an aligner's classes), the input ids' range
    int64_t kvrow_ = 0, qkvw_ = 0;
    // KV cache: [layers][k|v][cap][Hkv·hd]
    Buffer kv_;
    int64_t cap_ = 0, len_ = 0; // len_: positions filled (host view)
    // step scratch
    Buffer x1_, qkv1_, q1_, o1_, h1_, logits1_, part_, counter_;

    bool persistent_ = false; // QASR_CUDA_PERSISTENT=1: the whole step as one cooperative kernel (bf16 weights)
    PersistLaunch plaunch_;
    int psplits_ = 8;
    Buffer pprof_; // QASR_CUDA_PERSIST_PROFILE=1: ns per phase kind, summed over steps (block 0's view) // key splits of the persistent step's attention (QASR_CUDA_PERSIST_SPLITS)
    Buffer players_; // PersistLayer [L] on the device, for the KV cache players_kv_
    const void* players_kv_ = nullptr;
    void launch_persistent();
    int dec_splits_ = 16;    // key splits of the per-layer decode attention in the step being enqueued
    int dec_splits_fixed_ = 0; // QASR_CUDA_DEC_SPLITS=n: always n; else by the number of keys (splits_for)
    // ~32 keys per split, in three buckets (one captured graph each): fewer splits merge faster, more keep long
    // contexts parallel (H200, 0.6B bf16, ~200 keys: 8 splits 0.721 ms/token vs 16 splits 0.737, cluster merge)
    int splits_for(int64_t keys) const {
        if (dec_splits_fixed_) return dec_splits_fixed_;
        return keys <= 128 ? 4 : keys <= 256 ? 8 : 16;
    }
    bool fused_attn_ = true; // decode_attention (q/k-norm + RoPE + KV write + attention + merge in one kernel);
                             // QASR_CUDA_FUSED_ATTN=0: qk_norm_rope_kv + attention (+ merge), three kernels
    // prefill / encoder scratch
    Buffer px_, pbf_, pqkv_, pq_, po_, pgu_, plog_, deq_;
    Buffer emel_, ecols_, ea_, eb_, eflat_, eco_, ex_, ebf_, eqkv_, eatt_, eu_, eout_;
    int64_t resident_ = -1; // rows in eout_ from encode_audio_resident() not yet taken by prefill_resident()
    bool first_queued_ = false; // the prefill put token 0 in ring slot 0 (screened head): greedy() starts from it
    bool unwaited_ = false;     // see settle()
    Buffer plog_screen_, xpart_, screen_stats_; // the screened head's proxy logits and exact partials; its counter
    Buffer hrec_, hcounter_;                    // the fused screened head's block records and arrival count
    // The greedy choice through the screened head into *d_tok, the ring and the next step's input x (one kernel:
    // screened_head_choose; else the three-kernel form). False where the model has no screen (nothing queued).
    bool screened_choice(const float* x, bool advance);
    long screen_steps_ = 0;
    std::map<int, cudaGraphExec_t> graphs_; // the captured step per (split count, screened): key 2·splits + screened
    const void* graph_kv_ = nullptr;         // the KV cache the graphs were captured on
};

// The device's batched step (batch_step.cu): a session of its own with scratch for max_batch rows (≤ BatchRows::kMax).
std::unique_ptr<DeviceBatch> open_batch(const Model& m, const DeviceWeights& w, int max_batch);

} // namespace qasr::cuda::detail
