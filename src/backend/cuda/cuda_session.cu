// The CUDA backend's per-session engine (encoder, prefill, decode steps, greedy loop with a captured step graph
// and one-step-behind readback) and the device context that owns the uploaded weights and a pool of sessions.
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/decode_persistent.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/device.hpp"

#include "core/error.hpp"
#include "model/encoder.hpp"

#include "audio/mel.hpp"
#include "core/timer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

namespace qasr::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

void init_context(int ordinal) noexcept {
    if (cudaSetDevice(ordinal) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) cudaGetLastError();
    cublasHandle_t h = nullptr; // loads cuBLAS and its kernels once per process
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
}

namespace {

constexpr int kRing = 4;
constexpr int kDecodeSplits = 32; // most key splits of the decode attention (QASR_CUDA_DEC_SPLITS, default 16)

int64_t conv_len(int64_t n) { return (n + 1) / 2; }

class CudaSession final : public DeviceSession {
public:
    CudaSession(const Model& m, const DeviceWeights& w) : m_(m), w_(w) {
        QASR_CUDA(cudaSetDevice(w.ordinal));
        matvec_prefetch_prepare(w.ordinal);
        QASR_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
        QASR_CUBLAS(cublasCreate(&blas_));
        QASR_CUBLAS(cublasSetStream(blas_, s_));
        for (auto& e : ev_) QASR_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring_h_), sizeof(int2) * kRing, cudaHostAllocMapped));
        QASR_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&ring_d_), ring_h_, 0));
        QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&tok_h_), sizeof(int), cudaHostAllocDefault));
        ints_.alloc(4 * sizeof(int));
        const TextHParams& t = m.hp.text;
        D_ = t.hidden, Hq_ = t.n_heads, Hkv_ = t.n_kv_heads, hd_ = t.head_dim, I_ = t.intermediate, V_ = t.vocab_size;
        kvrow_ = int64_t(Hkv_) * hd_;
        qkvw_ = int64_t(Hq_ + 2 * Hkv_) * hd_;
        x1_.alloc(size_t(D_) * 4);
        qkv1_.alloc(size_t(qkvw_) * 4);
        q1_.alloc(size_t(Hq_) * hd_ * 4);
        o1_.alloc(size_t(Hq_) * hd_ * 4);
        h1_.alloc(size_t(I_) * 4);
        logits1_.alloc(size_t(V_) * 4);
        part_.alloc(size_t(Hq_) * kDecodeSplits * decode_partial_floats(hd_) * 4); // ≥ kernels.cu's hd + 2 too
        counter_.alloc(size_t(Hkv_) * sizeof(unsigned));
        const char* dsp = std::getenv("QASR_CUDA_DEC_SPLITS");
        dec_splits_fixed_ = dsp && std::atoi(dsp) > 0 ? std::clamp(std::atoi(dsp), 1, kDecodeSplits) : 0;
        dec_splits_ = dec_splits_fixed_ ? dec_splits_fixed_ : 16;
        QASR_CUDA(cudaMemset(counter_.get(), 0, size_t(Hkv_) * sizeof(unsigned)));
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
        argpart_.alloc(size_t(3) * std::max(plaunch_.grid, 256) * 4);
#ifdef QASR_CUDA_TIMELINE
        tl_.alloc(sizeof(detail::Timeline));
        QASR_CUDA(cudaMemset(tl_.get(), 0, sizeof(detail::Timeline)));
        timeline_bind_kernels(tl_.get());
        timeline_bind_prefetch(tl_.get());
#endif
        const char* pe = std::getenv("QASR_CUDA_PROFILE");
        profile_ = pe && *pe && std::string(pe) != "0";
        if (profile_)
            for (auto& e : pev_) QASR_CUDA(cudaEventCreate(&e));
    }
    ~CudaSession() override {
        cudaSetDevice(w_.ordinal);
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
#ifdef QASR_CUDA_TIMELINE
        print_timeline();
#endif
        for (auto& [n, g] : graphs_) cudaGraphExecDestroy(g);
        for (auto& e : ev_) cudaEventDestroy(e);
        cudaFreeHost(ring_h_);
        cudaFreeHost(tok_h_);
        cublasDestroy(blas_);
        cudaStreamDestroy(s_);
    }

    Tensor encode(const Tensor& mel) override;
    Tensor encode_audio(const std::vector<float>& audio, size_t min_samples, double* mel_ms) override;
    Tensor prefill(const std::vector<int>& ids, int64_t audio_begin, const Tensor& rows, int logits) override;
    Tensor step(int token) override;
    void greedy(int max_tokens, const std::function<bool(int, float)>& take) override;
    Tensor encode_stem(const Tensor& mel) override;
    Tensor encode_rows(const Tensor& x, int64_t window_rows) override;
    int64_t length() const override { return len_; }
    void truncate(int64_t n) override { len_ = std::max<int64_t>(0, std::min(len_, n)); }
    void extend(const Tensor& x) override;
    Tensor extended_logits(int64_t r0, int64_t n) override;

    // After a failed request the stream may hold queued work: drain it so the pooled session starts clean.
    void reset_after_error() noexcept {
        cudaStreamSynchronize(s_);
        cudaGetLastError();
    }

private:
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
    void enqueue_step();
    void launch_step();
    cudaGraphExec_t capture_step(int splits); // enqueue_step() with that many key splits, captured and instantiated
    void gemm_w(const bf16* A, int M, const DMat& W, float* C, float beta);
    Tensor encode_device(const float* d_mel, int T); // mel [n_mels, T] already on the device
    int stem_device(const float* d_mel, int T, int* window); // conv stem of every chunk → ex_ rows; returns A
    Tensor encode_layers(int A, int window);         // stem rows [A, d] in ex_ → projector rows on the host
    // The decoder layers over n input rows in px_ at positions len_ … len_+n-1 (the KV cache holds the earlier
    // ones); then len_ += n and the device position follows.
    void decoder_rows(int n);
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
    std::string skip_ = [] { // groups separated by ',' or '+' (scripts/cuda_ab.sh splits variants at commas)
        const char* e = std::getenv("QASR_CUDA_SKIP");
        std::string v = e ? "," + std::string(e) + "," : std::string();
        std::replace(v.begin(), v.end(), '+', ',');
        return v;
    }();
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
    cudaEvent_t ev_[kRing]{};
    int2* ring_h_ = nullptr;
    int2* ring_d_ = nullptr;
    int* tok_h_ = nullptr;
    Buffer ints_;
    int D_ = 0, Hq_ = 0, Hkv_ = 0, hd_ = 0, I_ = 0, V_ = 0;
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
    std::map<int, cudaGraphExec_t> graphs_; // the captured step per split count
    const void* graph_kv_ = nullptr;         // the KV cache the graphs were captured on
};

void CudaSession::gemm_w(const bf16* A, int M, const DMat& W, float* C, float beta) {
    const bf16* Wb = static_cast<const bf16*>(W.data);
    if (W.bits != 16) {
        deq_.ensure(size_t(W.rows * W.cols) * 2);
        dequant_bf16(W, deq_.as<bf16>(), s_);
        Wb = deq_.as<bf16>();
    }
    gemm(blas_, A, M, int(W.cols), Wb, int(W.rows), C, beta);
}

Tensor CudaSession::encode(const Tensor& mel) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (mel.dim(0) != m_.hp.audio.n_mels)
        fail("encoder", "mel has " + std::to_string(mel.dim(0)) + " bins, model wants " + std::to_string(m_.hp.audio.n_mels));
    if (mel.dim(1) <= 0) fail("encoder", "no mel frames");
    emel_.ensure(mel.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(emel_.get(), mel.ptr(), mel.size() * 4, cudaMemcpyHostToDevice, s_));
    return encode_device(emel_.as<float>(), int(mel.dim(1)));
}

Tensor CudaSession::encode_audio(const std::vector<float>& audio, size_t min_samples, double* mel_ms) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    Stopwatch sw;
    const size_t N = std::max(audio.size(), min_samples);
    if (N <= 200) fail("mel", "audio of " + std::to_string(N) + " samples is too short for the STFT");
    const int T = int(MelFrontend::n_frames(N)), n_mels = m_.hp.audio.n_mels;
    maudio_.ensure(std::max<size_t>(audio.size(), 1) * 4);
    QASR_CUDA(cudaMemcpyAsync(maudio_.get(), audio.data(), audio.size() * 4, cudaMemcpyHostToDevice, s_));
    mwork_.ensure(log_mel_work_bytes(T, n_mels));
    emel_.ensure(size_t(T) * n_mels * 4);
    log_mel(blas_, maudio_.as<float>(), int64_t(audio.size()), int64_t(N), T, n_mels, w_.mel_window, w_.mel_dft,
            w_.mel_filters, mwork_.as<double>(), emel_.as<float>(), s_);
    if (mel_ms) {
        QASR_CUDA(cudaStreamSynchronize(s_));
        *mel_ms = sw.ms();
    }
    return encode_device(emel_.as<float>(), T);
}

Tensor CudaSession::encode_device(const float* d_mel, int T) {
    int window = 0;
    const int A = stem_device(d_mel, T, &window);
    return encode_layers(A, window);
}

Tensor CudaSession::encode_stem(const Tensor& mel) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const AudioHParams& hp = m_.hp.audio;
    if (mel.dim(0) != hp.n_mels || mel.dim(1) <= 0 || mel.dim(1) > hp.chunk_frames())
        fail("encoder", "a stem chunk is [n_mels, 1..chunk_frames] of mel");
    emel_.ensure(mel.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(emel_.get(), mel.ptr(), mel.size() * 4, cudaMemcpyHostToDevice, s_));
    int window = 0;
    const int A = stem_device(emel_.as<float>(), int(mel.dim(1)), &window);
    Tensor out({int64_t(A), int64_t(hp.d_model)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), ex_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

int CudaSession::stem_device(const float* d_mel, int T, int* window_out) {
    const AudioHParams& hp = m_.hp.audio;
    const int n_mels = hp.n_mels, cf = hp.chunk_frames(), C = (T + cf - 1) / cf;
    const int Ch = hp.conv_channels, d = hp.d_model;
    const int H1 = int(conv_len(n_mels)), W1 = int(conv_len(cf)), H2 = int(conv_len(H1)), W2 = int(conv_len(W1));
    const int H3 = int(conv_len(H2)), W3 = int(conv_len(W2));
    const int A = int(audio_token_count(T, hp));
    int m = 0;
    for (int c = 0; c < C; ++c) m = std::max(m, int(audio_token_count(std::min(cf, T - c * cf), hp)));
    const int window = m * (hp.n_window_infer / cf);

    const size_t p1 = size_t(C) * H1 * W1, p2 = size_t(C) * H2 * W2, p3 = size_t(C) * H3 * W3;
    ecols_.ensure(std::max({p1 * 16, p2 * Ch * 9, p3 * Ch * 9, size_t(C) * W3 * Ch * H3}) * 2);
    ea_.ensure(p1 * Ch * 4);
    eb_.ensure(p2 * Ch * 4);
    bf16* cols = ecols_.as<bf16>();
    im2col_mel(d_mel, n_mels, T, cf, C, 16, cols, s_);
    gemm(blas_, cols, int(p1), 16, w_.conv1_w, Ch, ea_.as<float>(), 0.0f);
    bias_act(ea_.as<float>(), int(p1), Ch, w_.conv1_b, true, nullptr, s_);
    im2col(ea_.as<float>(), C, H1, W1, Ch, cols, s_);
    gemm(blas_, cols, int(p2), Ch * 9, w_.conv2_w, Ch, eb_.as<float>(), 0.0f);
    bias_act(eb_.as<float>(), int(p2), Ch, w_.conv2_b, true, nullptr, s_);
    im2col(eb_.as<float>(), C, H2, W2, Ch, cols, s_);
    gemm(blas_, cols, int(p3), Ch * 9, w_.conv3_w, Ch, ea_.as<float>(), 0.0f);
    bias_act(ea_.as<float>(), int(p3), Ch, w_.conv3_b, true, nullptr, s_);
    flatten_stem(ea_.as<float>(), C, H3, W3, Ch, cols, s_);
    eco_.ensure(size_t(C) * W3 * d * 4);
    gemm_w(cols, C * W3, w_.conv_out, eco_.as<float>(), 0.0f);
    ex_.ensure(size_t(A) * d * 4);
    float* x = ex_.as<float>();
    add_pe(eco_.as<float>(), A, d, W3, w_.pe, x, s_);
    *window_out = window;
    return A;
}

Tensor CudaSession::encode_rows(const Tensor& rows, int64_t window_rows) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const AudioHParams& hp = m_.hp.audio;
    if (rows.rows() <= 0 || rows.cols() != hp.d_model) fail("encoder", "stem rows of the wrong shape");
    if (window_rows <= 0) fail("encoder", "attention window of no rows");
    ex_.ensure(rows.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(ex_.get(), rows.ptr(), rows.size() * 4, cudaMemcpyHostToDevice, s_));
    return encode_layers(int(rows.rows()), int(window_rows));
}

Tensor CudaSession::encode_layers(int A, int window) {
    const AudioHParams& hp = m_.hp.audio;
    const int d = hp.d_model, F = hp.ffn_dim, heads = hp.n_heads;
    float* x = ex_.as<float>();
    ebf_.ensure(size_t(A) * std::max(d, F) * 2);
    eqkv_.ensure(size_t(A) * 3 * d * 4);
    eatt_.ensure(size_t(A) * d * 4);
    eu_.ensure(size_t(A) * F * 4);
    bf16* abf = ebf_.as<bf16>();
    Stopwatch sw;
    if (profile_) ++prof_calls_["encoder"], npev_ = 0, mark("start");
    for (const DevEncLayer& l : w_.enc) {
        layer_norm(x, A, d, l.ln1_w, l.ln1_b, 1e-5f, abf, s_);
        mark("norm");
        gemm_w(abf, A, l.qkv, eqkv_.as<float>(), 0.0f);
        mark("qkv");
        bias_act(eqkv_.as<float>(), A, 3 * d, l.qkv_b, false, nullptr, s_);
        mark("bias");
        AttnArgs at;
        at.q = eqkv_.as<float>();
        at.k = eqkv_.as<float>() + d;
        at.v = eqkv_.as<float>() + 2 * d;
        at.q_stride = at.kv_stride = 3 * d;
        at.o = eatt_.as<float>();
        at.o_stride = d;
        at.n = A;
        at.heads = at.kv_heads = heads;
        at.hd = d / heads;
        at.causal = false;
        at.window = window;
        attention(at, s_);
        mark("attention");
        to_bf16(eatt_.as<float>(), size_t(A) * d, abf, s_);
        mark("to_bf16");
        gemm_w(abf, A, l.o, x, 1.0f);
        mark("o");
        bias_act(x, A, d, l.o_b, false, nullptr, s_);
        mark("bias");
        layer_norm(x, A, d, l.ln2_w, l.ln2_b, 1e-5f, abf, s_);
        mark("norm");
        gemm_w(abf, A, l.fc1, eu_.as<float>(), 0.0f);
        mark("fc1");
        bias_act(eu_.as<float>(), A, F, l.fc1_b, true, abf, s_);
        mark("bias_gelu");
        gemm_w(abf, A, l.fc2, x, 1.0f);
        mark("fc2");
        bias_act(x, A, d, l.fc2_b, false, nullptr, s_);
        mark("bias");
    }
    rows_flush("encoder");
    npev_ = 0;
    host_report("encoder", A, sw);
    layer_norm(x, A, d, w_.ln_post_w, w_.ln_post_b, 1e-5f, abf, s_);
    gemm_w(abf, A, w_.proj1, eatt_.as<float>(), 0.0f);
    bias_act(eatt_.as<float>(), A, d, w_.proj1_b, true, abf, s_);
    const int O = int(w_.proj2.rows);
    eout_.ensure(size_t(A) * O * 4);
    gemm_w(abf, A, w_.proj2, eout_.as<float>(), 0.0f);
    bias_act(eout_.as<float>(), A, O, w_.proj2_b, false, nullptr, s_);
    Tensor out({int64_t(A), int64_t(O)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), eout_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
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
    QASR_CUDA(cudaStreamSynchronize(s_));
    kv_ = std::move(nk);
    cap_ = ncap;
}

Tensor CudaSession::prefill(const std::vector<int>& ids, int64_t audio_begin, const Tensor& rows, int logits) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const int L = int(ids.size());
    if (L <= 0) fail("decoder", "empty prompt");
    for (int id : ids)
        if (id < 0 || id >= V_) fail("decoder", "token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(V_));
    const int64_t A = rows.rows();
    if (A && (rows.cols() != D_ || audio_begin < 0 || audio_begin + A > L)) fail("decoder", "audio rows do not fit the prompt");
    len_ = 0;
    ensure_kv(L + 1024);
    px_.ensure(size_t(L) * D_ * 4);
    float* x = px_.as<float>();
    // ids → device through the scratch of the logits (ints fit in a float buffer; sized for the logits up front,
    // so head_rows() does not reallocate it under the queued embedding)
    plog_.ensure(std::max(size_t(L) * 4, logits < 0 ? size_t(L) * V_ * 4 : size_t(V_) * 4));
    QASR_CUDA(cudaMemcpyAsync(plog_.get(), ids.data(), size_t(L) * 4, cudaMemcpyHostToDevice, s_));
    embed(w_.embed, plog_.as<int>(), L, x, s_);
    if (A) QASR_CUDA(cudaMemcpyAsync(x + audio_begin * D_, rows.ptr(), rows.size() * 4, cudaMemcpyHostToDevice, s_));
    const float eps = m_.hp.text.rms_eps;
    decoder_rows(L); // len_ = L, pos = L
    Tensor out;
    if (logits < 0) {
        const float* lg = head_rows(x, L);
        QASR_CUDA(cudaMemcpyAsync(logits1_.get(), lg + size_t(L - 1) * V_, size_t(V_) * 4, cudaMemcpyDeviceToDevice, s_));
        out = Tensor({int64_t(L), int64_t(V_)});
        QASR_CUDA(cudaMemcpyAsync(out.ptr(), lg, out.size() * 4, cudaMemcpyDeviceToHost, s_));
    } else {
        matvec(w_.head, x + size_t(L - 1) * D_, w_.norm, eps, logits1_.as<float>(), Epi::Store, s_);
        if (logits > 0) {
            out = Tensor({1, int64_t(V_)});
            QASR_CUDA(cudaMemcpyAsync(out.ptr(), logits1_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
        }
    }
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

void CudaSession::decoder_rows(int L) {
    set_ints(d_pos(), int(len_), 0, s_); // the rows' first position; count = 0
    const int I = I_, qw = Hq_ * hd_;
    pbf_.ensure(size_t(L) * std::max({D_, qw, I}) * 2);
    pqkv_.ensure(size_t(L) * qkvw_ * 4);
    pq_.ensure(size_t(L) * qw * 4);
    po_.ensure(size_t(L) * qw * 4);
    pgu_.ensure(size_t(L) * 2 * I * 4);
    float* x = px_.as<float>();
    bf16* ubf = pbf_.as<bf16>();
    const float eps = m_.hp.text.rms_eps;
    Stopwatch sw;
    if (profile_) ++prof_calls_["prefill"], npev_ = 0, mark("start");
    for (size_t li = 0; li < w_.dec.size(); ++li) {
        const DevDecLayer& l = w_.dec[li];
        rms_norm(x, L, D_, l.in_norm, eps, nullptr, ubf, s_);
        mark("norm");
        gemm_w(ubf, L, l.qkv, pqkv_.as<float>(), 0.0f);
        mark("qkv");
        qk_norm_rope_kv(pqkv_.as<float>(), L, d_pos(), Hq_, Hkv_, hd_, l.q_norm, l.k_norm, eps, w_.inv_freq,
                        pq_.as<float>(), kc(li), vc(li), s_);
        mark("qk_norm_rope");
        AttnArgs at = dec_attn(li, pq_.as<float>(), po_.as<float>(), L);
        at.past = d_pos();
        attention(at, s_);
        mark("attention");
        to_bf16(po_.as<float>(), size_t(L) * qw, ubf, s_);
        mark("to_bf16");
        gemm_w(ubf, L, l.o, x, 1.0f);
        mark("o");
        rms_norm(x, L, D_, l.post_norm, eps, nullptr, ubf, s_);
        mark("norm");
        gemm_w(ubf, L, l.gateup, pgu_.as<float>(), 0.0f);
        mark("gateup");
        swiglu_bf16(pgu_.as<float>(), L, I, ubf, s_);
        mark("swiglu");
        gemm_w(ubf, L, l.down, x, 1.0f);
        mark("down");
    }
    rows_flush("prefill");
    npev_ = 0;
    host_report("prefill", L, sw);
    len_ += L;
    set_ints(d_pos(), int(len_), 0, s_);
}

void CudaSession::extend(const Tensor& xin) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const int n = int(xin.rows());
    if (n <= 0 || xin.cols() != D_) fail("decoder", "extend() needs rows of the model width");
    ensure_kv(len_ + n + 1);
    px_.ensure(size_t(n) * D_ * 4);
    QASR_CUDA(cudaMemcpyAsync(px_.get(), xin.ptr(), xin.size() * 4, cudaMemcpyHostToDevice, s_));
    decoder_rows(n);
    ext_rows_ = n;
    QASR_CUDA(cudaStreamSynchronize(s_));
}

Tensor CudaSession::extended_logits(int64_t r0, int64_t n) {
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
void CudaSession::enqueue_step() {
    const float eps = m_.hp.text.rms_eps;
    float* x = x1_.as<float>();
    mark("start");
    if (run("embed")) embed(w_.embed, d_tok(), 1, x, s_);
    mark("embed");
    for (size_t li = 0; li < w_.dec.size(); ++li) {
        const DevDecLayer& l = w_.dec[li];
        const bool qkv_early = run("qkv") && matvec(l.qkv, x, l.in_norm, eps, qkv1_.as<float>(), Epi::Store, s_);
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
        if (run("o")) matvec(l.o, o1_.as<float>(), nullptr, eps, x, Epi::Add, s_);
        mark("o_proj");
        if (run("gateup")) matvec(l.gateup, x, l.post_norm, eps, h1_.as<float>(), Epi::SwiGLU, s_);
        mark("gate_up");
        if (run("down")) matvec(l.down, h1_.as<float>(), nullptr, eps, x, Epi::Add, s_);
        mark("down");
    }
    if (run("head")) matvec(w_.head, x, w_.norm, eps, logits1_.as<float>(), Epi::Store, s_);
    mark("lm_head");
    argmax_token(logits1_.as<float>(), V_, argpart_.as<float>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, true, s_);
    mark("argmax");
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

void CudaSession::launch_step() {
    if (persistent_ && !profile_) return launch_persistent();
    if (profile_) { // eager, with an event after each kernel group
        npev_ = 0;
        dec_splits_ = splits_for(len_ + 1);
        enqueue_step();
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
        for (const int keys : {128, 256, 257}) {
            const int n = splits_for(keys);
            if (!graphs_.count(n)) graphs_[n] = capture_step(n);
        }
        graph_kv_ = kv_.get();
    }
    const int n = splits_for(len_ + 1); // the step attends over len_ + 1 keys
    auto it = graphs_.find(n);
    if (it == graphs_.end()) it = graphs_.emplace(n, capture_step(n)).first;
    QASR_CUDA(cudaGraphLaunch(it->second, s_));
}

cudaGraphExec_t CudaSession::capture_step(int splits) {
    dec_splits_ = splits;
    cudaGraph_t g = nullptr;
    QASR_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
    try {
        enqueue_step();
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

Tensor CudaSession::step(int token) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (token < 0 || token >= V_) fail("decoder", "token id " + std::to_string(token) + " is outside the vocabulary");
    if (len_ <= 0) fail("decoder", "step() before prefill()");
    ensure_kv(len_ + 1);
    *tok_h_ = token;
    QASR_CUDA(cudaMemcpyAsync(d_tok(), tok_h_, sizeof(int), cudaMemcpyHostToDevice, s_));
    launch_step();
    ++len_;
    Tensor out({1, int64_t(V_)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), logits1_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

void CudaSession::greedy(int max_tokens, const std::function<bool(int, float)>& take) {
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (len_ <= 0) fail("decoder", "greedy() before prefill()");
    if (max_tokens <= 0) return;
    ensure_kv(len_ + max_tokens + 1);
    // Token 0 comes from the prefill's logits (already on the device).
    set_ints(d_count(), 0, 0, s_);
    argmax_token(logits1_.as<float>(), V_, argpart_.as<float>(), d_tok(), d_pos(), d_count(), ring_d_, kRing, false, s_);
    QASR_CUDA(cudaEventRecord(ev_[0], s_));
    for (int n = 0; n < max_tokens; ++n) {
        if (n + 1 < max_tokens) { // queue the step that makes token n+1 before reading token n
            launch_step();
            QASR_CUDA(cudaEventRecord(ev_[(n + 1) % kRing], s_));
        }
        QASR_CUDA(cudaEventSynchronize(ev_[n % kRing]));
        const volatile int* slot = reinterpret_cast<volatile int*>(ring_h_ + n % kRing);
        const int id = slot[0], lp_bits = slot[1];
        float lp;
        std::memcpy(&lp, &lp_bits, 4);
        ++len_;
        if (!take(id, lp)) break;
    }
    QASR_CUDA(cudaStreamSynchronize(s_)); // the one step queued past a stop finishes before the session is reused
}

class CudaContext final : public DeviceContext, public std::enable_shared_from_this<CudaContext> {
public:
    CudaContext(const Model& m, int ordinal) : m_(m), ordinal_(ordinal) {
        QASR_CUDA(cudaSetDevice(ordinal));
        cudaDeviceProp p{};
        QASR_CUDA(cudaGetDeviceProperties(&p, ordinal));
        name_ = "cuda:" + std::to_string(ordinal) + " (" + p.name + ", sm_" + std::to_string(p.major) +
                std::to_string(p.minor) + ")";
        w_ = DeviceWeights::upload(m, ordinal);
        const char* pdl = std::getenv("QASR_CUDA_PDL");
        set_pdl(!(pdl && std::string(pdl) == "0"));
    }
    std::unique_ptr<DeviceSession> open() const override;
    std::string name() const override { return name_; }
    size_t weight_bytes() const override { return w_->bytes; }

    void give_back(std::unique_ptr<CudaSession> s) const {
        std::lock_guard<std::mutex> lk(mu_);
        pool_.push_back(std::move(s));
    }

private:
    const Model& m_;
    int ordinal_;
    std::string name_;
    std::unique_ptr<DeviceWeights> w_;
    mutable std::mutex mu_;
    mutable std::vector<std::unique_ptr<CudaSession>> pool_;
};

// A pooled session: forwards to the engine and returns it to the context's pool when the request ends.
class Pooled final : public DeviceSession {
public:
    Pooled(std::shared_ptr<const CudaContext> ctx, std::unique_ptr<CudaSession> s) : ctx_(std::move(ctx)), s_(std::move(s)) {}
    ~Pooled() override {
        if (!s_) return;
        s_->reset_after_error();
        ctx_->give_back(std::move(s_));
    }
    Tensor encode(const Tensor& mel) override { return s_->encode(mel); }
    Tensor encode_audio(const std::vector<float>& a, size_t min_samples, double* mel_ms) override {
        return s_->encode_audio(a, min_samples, mel_ms);
    }
    Tensor prefill(const std::vector<int>& ids, int64_t b, const Tensor& rows, int logits) override {
        return s_->prefill(ids, b, rows, logits);
    }
    Tensor step(int token) override { return s_->step(token); }
    void greedy(int n, const std::function<bool(int, float)>& take) override { s_->greedy(n, take); }
    Tensor encode_stem(const Tensor& mel) override { return s_->encode_stem(mel); }
    Tensor encode_rows(const Tensor& x, int64_t w) override { return s_->encode_rows(x, w); }
    int64_t length() const override { return s_->length(); }
    void truncate(int64_t n) override { s_->truncate(n); }
    void extend(const Tensor& x) override { s_->extend(x); }
    Tensor extended_logits(int64_t r0, int64_t n) override { return s_->extended_logits(r0, n); }

private:
    std::shared_ptr<const CudaContext> ctx_;
    std::unique_ptr<CudaSession> s_;
};

std::unique_ptr<DeviceSession> CudaContext::open() const {
    std::unique_ptr<CudaSession> s;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (!pool_.empty()) {
            s = std::move(pool_.back());
            pool_.pop_back();
        }
    }
    if (!s) s = std::make_unique<CudaSession>(m_, *w_);
    return std::make_unique<Pooled>(shared_from_this(), std::move(s));
}

} // namespace

std::shared_ptr<const DeviceContext> open_context(const Model& model, int ordinal) {
    const int n = device_count();
    if (n == 0) fail("cuda", "no CUDA device found (is the NVIDIA driver installed?)");
    if (ordinal >= n) fail("cuda", "cuda:" + std::to_string(ordinal) + " requested but only " + std::to_string(n) + " device(s) present");
    return std::make_shared<CudaContext>(model, ordinal);
}

} // namespace qasr::cuda
