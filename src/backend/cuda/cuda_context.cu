// The CUDA backend's device context: the devices present, the process's first contact with one (context, cuBLAS,
// the front end's kernels primed while the weights upload), and CudaContext, which owns a model's uploaded weights
// and pools the sessions (cuda_session.cu) and batches its requests use.
#include "backend/cuda/cuda_session.hpp"

#include "core/log.hpp"
#include "core/timer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace qasr::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

std::string device_description(int ordinal) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess) {
        cudaGetLastError();
        return "(properties unavailable)";
    }
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s, sm_%d%d, %.1f GiB, %d SMs", p.name, p.major, p.minor,
                  double(p.totalGlobalMem) / double(1u << 30), p.multiProcessorCount);
    return buf;
}

void init_context(int ordinal) noexcept {
    Stopwatch sw;
    if (cudaSetDevice(ordinal) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) cudaGetLastError();
    const double t_ctx = sw.ms();
    cublasHandle_t h = nullptr; // loads cuBLAS and its kernels once per process
    if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) cublasDestroy(h);
    char msg[128];
    std::snprintf(msg, sizeof msg, "cuda: context %.0f ms, cuBLAS %.0f ms (beside the checkpoint's loading)", t_ctx,
                  sw.ms() - t_ctx);
    try {
        log(LogLevel::Info, msg);
    } catch (...) { // a log sink that throws must not end the process
    }
}

// The front end's first cublasDgemm calls cost 37–55 ms on the first request (H200): made here once, at an 11 s
// clip's shapes, on a handle and stream of their own while the weights are being uploaded.
void prime_kernels(int ordinal) noexcept {
    if (const char* e = std::getenv("QASR_CUDA_PRIME"); e && std::string(e) == "0") return; // A/B: no priming
    Stopwatch sw;
    cudaStream_t s = nullptr;
    cublasHandle_t h = nullptr;
    double* buf = nullptr;
    const int T = 1100;
    const size_t n = size_t(402) * T + size_t(400) * T + size_t(402) * 402 + size_t(128) * T + size_t(201) * T;
    bool ok = cudaSetDevice(ordinal) == cudaSuccess && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
              cublasCreate(&h) == CUBLAS_STATUS_SUCCESS && cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS &&
              cudaMallocAsync(reinterpret_cast<void**>(&buf), n * sizeof(double), s) == cudaSuccess &&
              cudaMemsetAsync(buf, 0, n * sizeof(double), s) == cudaSuccess;
    if (ok) {
        const double one = 1.0, zero = 0.0;
        double *spec = buf, *frames = spec + size_t(402) * T, *dft = frames + size_t(400) * T, *mel = dft + 402 * 402,
               *power = mel + size_t(128) * T;
        ok = cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 402, T, 400, &one, dft, 402, frames, 400, &zero, spec, 402) ==
                 CUBLAS_STATUS_SUCCESS &&
             cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 128, T, 201, &one, dft, 128, power, 201, &zero, mel, 128) ==
                 CUBLAS_STATUS_SUCCESS;
    }
    if (buf) cudaFreeAsync(buf, s);
    if (s) cudaStreamSynchronize(s);
    if (h) cublasDestroy(h);
    if (s) cudaStreamDestroy(s);
    cudaGetLastError();
    char msg[128];
    std::snprintf(msg, sizeof msg, "cuda: front-end products primed in %.0f ms%s (beside the weights' upload)", sw.ms(),
                  ok ? "" : " (failed; the first request pays)");
    try {
        log(LogLevel::Info, msg);
    } catch (...) {
    }
}

namespace {

using detail::CudaSession;

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
        if (const char* e = std::getenv("QASR_CUDA_POOL_LIMIT_MB"); e && *e) {
            char* end = nullptr;
            const unsigned long long mb = std::strtoull(e, &end, 10);
            if (*end || mb > (1ull << 30)) fail("cuda", std::string("QASR_CUDA_POOL_LIMIT_MB=") + e + ": expected a number of MiB");
            pool_limit_ = size_t(mb) << 20;
        }
    }
    std::unique_ptr<DeviceSession> open() const override;
    std::unique_ptr<DeviceBatch> open_batch(int max_batch) const override;
    std::string name() const override { return name_; }
    size_t weight_bytes() const override { return w_->bytes; }

    // A session over the pool limit is freed here (a long request's KV cache and scratch are not kept for the next)
    void give_back(std::unique_ptr<CudaSession> s) const {
        if (s->scaling_bytes() > pool_limit_) return;
        std::lock_guard<std::mutex> lk(mu_);
        pool_.push_back(std::move(s));
    }
    size_t pooled_bytes() const override {
        std::lock_guard<std::mutex> lk(mu_);
        size_t n = 0;
        for (const auto& s : pool_) n += s->scaling_bytes();
        return n;
    }
    // Frees the idle sessions and batches (outside the lock); returns how many.
    size_t release_idle() const {
        std::vector<std::unique_ptr<CudaSession>> s;
        std::vector<std::unique_ptr<DeviceBatch>> b;
        {
            std::lock_guard<std::mutex> lk(mu_);
            s.swap(pool_);
            b.swap(batch_pool_);
        }
        return s.size() + b.size();
    }

private:
    const Model& m_;
    int ordinal_;
    std::string name_;
    std::unique_ptr<DeviceWeights> w_;
    mutable std::mutex mu_;
    mutable std::vector<std::unique_ptr<CudaSession>> pool_;
    mutable std::vector<std::unique_ptr<DeviceBatch>> batch_pool_; // given back by PooledBatch
    size_t pool_limit_ = size_t(2048) << 20;

    friend class PooledBatch;
};

// A pooled batch: forwards to the batch and gives it back to the context when its user is done (beam search opens
// one per request; its recorded step graphs then serve the next request).
class PooledBatch final : public DeviceBatch {
public:
    PooledBatch(std::shared_ptr<const CudaContext> ctx, std::unique_ptr<DeviceBatch> b) : ctx_(std::move(ctx)), b_(std::move(b)) {}
    ~PooledBatch() override {
        std::lock_guard<std::mutex> lk(ctx_->mu_);
        ctx_->batch_pool_.push_back(std::move(b_));
    }
    int max_batch() const override { return b_->max_batch(); }
    void step(DeviceSession* const* s, const int* tokens, size_t B, int* ids, float* logprobs) override {
        b_->step(s, tokens, B, ids, logprobs);
    }
    void step_top(DeviceSession* const* s, const int* tokens, size_t B, int k, int* ids, float* logprobs) override {
        b_->step_top(s, tokens, B, k, ids, logprobs);
    }

private:
    std::shared_ptr<const CudaContext> ctx_;
    std::unique_ptr<DeviceBatch> b_;
};

// A pooled session: forwards to the engine and returns it to the context's pool when the request ends.
class Pooled final : public DeviceSession {
public:
    Pooled(std::shared_ptr<const CudaContext> ctx, std::unique_ptr<CudaSession> s) : ctx_(std::move(ctx)), s_(std::move(s)) {}
    ~Pooled() override {
        if (!s_) return;
        s_->end_request();
        s_->record_passes(true);
        ctx_->give_back(std::move(s_));
    }
    Tensor encode(const Tensor& mel) override { return s_->encode(mel); }
    Tensor encode_audio(const std::vector<float>& a, size_t min_samples, double* mel_ms) override {
        return s_->encode_audio(a, min_samples, mel_ms);
    }
    Tensor prefill(const std::vector<int>& ids, int64_t b, const Tensor& rows, int logits) override {
        return s_->prefill(ids, b, rows, logits);
    }
    int64_t encode_audio_resident(const std::vector<float>& a, size_t min_samples, double* mel_ms) override {
        return s_->encode_audio_resident(a, min_samples, mel_ms);
    }
    void prefill_resident(const std::vector<int>& ids, int64_t b) override { s_->prefill_resident(ids, b); }
    void reserve_kv(int64_t positions) override { s_->reserve_kv(positions); }
    Tensor step(int token) override { return s_->step(token); }
    void greedy(int n, const std::function<bool(int, float)>& take) override { s_->greedy(n, take); }
    Tensor encode_stem(const Tensor& mel) override { return s_->encode_stem(mel); }
    Tensor encode_rows(const Tensor& x, int64_t w) override { return s_->encode_rows(x, w); }
    int64_t length() const override { return s_->length(); }
    void truncate(int64_t n) override { s_->truncate(n); }
    void extend(const Tensor& x) override { s_->extend(x); }
    Tensor extended_logits(int64_t r0, int64_t n) override { return s_->extended_logits(r0, n); }
    void record_passes(bool on) override { s_->record_passes(on); }
    void batch_first(int max_tokens, int* id, float* lp) override { s_->batch_first(max_tokens, id, lp); }
    void copy_cache(DeviceSession& src, int64_t from) override { s_->copy_cache(src, from); }
    DeviceSession* inner() override { return s_.get(); }

private:
    std::shared_ptr<const CudaContext> ctx_;
    std::unique_ptr<CudaSession> s_;
};

std::unique_ptr<DeviceBatch> CudaContext::open_batch(int max_batch) const {
    QASR_CUDA(cudaSetDevice(ordinal_));
    std::unique_ptr<DeviceBatch> b;
    {
        std::lock_guard<std::mutex> lk(mu_);
        const int want = std::clamp(max_batch, 1, BatchRows::kMax);
        for (auto it = batch_pool_.begin(); it != batch_pool_.end(); ++it)
            if ((*it)->max_batch() == want) {
                b = std::move(*it);
                batch_pool_.erase(it);
                break;
            }
    }
    if (!b) b = detail::open_batch(m_, *w_, max_batch);
    return std::make_unique<PooledBatch>(shared_from_this(), std::move(b));
}

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

// The live contexts, for release_idle_sessions()
struct Contexts {
    std::mutex mu;
    std::vector<std::weak_ptr<const CudaContext>> all;
};
Contexts& contexts() {
    static Contexts* c = new Contexts; // never destroyed: contexts may end during static destruction
    return *c;
}

} // namespace

size_t release_idle_sessions() {
    std::vector<std::shared_ptr<const CudaContext>> live;
    {
        Contexts& c = contexts();
        std::lock_guard<std::mutex> lk(c.mu);
        for (const auto& w : c.all)
            if (auto p = w.lock()) live.push_back(std::move(p));
    }
    size_t n = 0;
    for (const auto& ctx : live) n += ctx->release_idle();
    return n;
}

std::shared_ptr<const DeviceContext> open_context(const Model& model, int ordinal) {
    const int n = device_count();
    if (n == 0) fail("cuda", "no CUDA device found (is the NVIDIA driver installed?)");
    if (ordinal >= n) fail("cuda", "cuda:" + std::to_string(ordinal) + " requested but only " + std::to_string(n) + " device(s) present");
    auto ctx = std::make_shared<CudaContext>(model, ordinal);
    Contexts& c = contexts();
    std::lock_guard<std::mutex> lk(c.mu);
    c.all.erase(std::remove_if(c.all.begin(), c.all.end(), [](const auto& w) { return w.expired(); }), c.all.end());
    c.all.push_back(ctx);
    return ctx;
}

} // namespace qasr::cuda
