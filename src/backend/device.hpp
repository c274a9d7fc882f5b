// Accelerator backends (the CUDA backend, src/backend/cuda/): the weights live on the device and a session's
// stages (encoder, prefill, decode steps, greedy decoding) run there. The CPU path needs none of this: a Model
// without a DeviceContext runs the ops of src/ops/ on the host. The CPU-only build compiles this interface and
// open_device(), which then refuses every device but "cpu".
#pragma once
#include "core/tensor.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qasr {

struct Model;

class DeviceSession {
public:
    virtual ~DeviceSession() = default;
    // mel [n_mels, T] → projector rows [A, D] (host copy).
    virtual Tensor encode(const Tensor& mel) = 0;
    // Samples → log-mel on the device (spec §3, fp32) → encoder; *mel_ms gets the front end's share of the time.
    virtual Tensor encode_audio(const std::vector<float>& audio, size_t min_samples, double* mel_ms) = 0;
    // Clears the KV cache and runs the decoder over the prompt ids, the audio rows replacing the placeholders at
    // [audio_begin, audio_begin + A). logits: 0 = keep the last position's on the device (for greedy()), 1 = also
    // return them [1, V], -1 = return every position's [L, V].
    virtual Tensor prefill(const std::vector<int>& ids, int64_t audio_begin, const Tensor& audio_rows, int logits) = 0;
    // The same two without the host round trip, for greedy decoding: encode_audio_resident() queues the front end and
    // the encoder and returns the number of audio rows, which stay on the device (nothing waits for them: the host
    // builds the prompt and queues the prefill while the encoder runs); prefill_resident() is prefill(…, 0) with
    // those rows. A prefill_resident() without a preceding encode_audio_resident() is an error.
    virtual int64_t encode_audio_resident(const std::vector<float>& audio, size_t min_samples, double* mel_ms) = 0;
    virtual void prefill_resident(const std::vector<int>& ids, int64_t audio_begin) = 0;
    // Before a request's prefill: room in the KV cache for `positions` positions (its prompt and the decoding ahead;
    // greedy() needs room for every token it may take), made while the cache holds nothing to copy. The positions
    // held are dropped.
    virtual void reserve_kv(int64_t positions) { (void)positions; }
    // One decode step for `token` at the next position; its logits [1, V] on the host.
    virtual Tensor step(int token) = 0;
    // Greedy decoding from the state prefill() left. The argmax (and the chosen token's log-probability) is
    // computed on the device and feeds the next step directly; step n+1 is queued before token n is read back,
    // so the host checks its stop rules one step behind and the device never waits for it. take(id, logprob)
    // receives the tokens in order and returns false to stop; at most max_tokens tokens.
    virtual void greedy(int max_tokens, const std::function<bool(int, float)>& take) = 0;

    // Streaming (pipeline/stream_engine.hpp): the KV cache persists between calls.
    // Conv stem of one chunk: normalized mel [n_mels, frames] (frames ≤ a chunk) → rows [A, d] after conv_out and
    // the chunk's sinusoids (encode_stem_chunk, model/encoder.hpp).
    virtual Tensor encode_stem(const Tensor& mel) = 0;
    // Transformer layers, ln_post and projector over packed conv-stem rows x [A, d] (rows of one attention window
    // attend to each other, windows of window_rows rows) → [A, D] on the host.
    virtual Tensor encode_rows(const Tensor& x, int64_t window_rows) = 0;
    virtual int64_t length() const = 0;   // positions in the KV cache
    virtual void truncate(int64_t n) = 0; // keep the first n positions
    // The decoder over input rows x [n, D] at positions length() … length()+n-1; their keys and values join the
    // cache; the hidden rows stay on the device for extended_logits().
    virtual void extend(const Tensor& x) = 0;
    // Logits [n, V] of rows r0 … r0+n-1 of the last extend().
    virtual Tensor extended_logits(int64_t r0, int64_t n) = 0;
    // Whether the row passes this request runs for the first time are recorded for later requests of the same
    // shape (where the backend does that; on by default, and again for the next request). The warm-up turns it
    // off: its noise lengths are not the requests', and each recording would make its next pass wait.
    virtual void record_passes(bool on) { (void)on; }

    // Batched decoding across requests (DeviceBatch): after prefill_resident(), makes room in the KV cache for
    // max_tokens more positions and returns the first token greedy() would start from (the prefill's choice) with
    // its log-probability. The session's later steps then run in a DeviceBatch.
    virtual void batch_first(int max_tokens, int* id, float* logprob) {
        (void)max_tokens, (void)id, (void)logprob;
        throw_unsupported("batched decoding");
    }
    // Beam search (pipeline/beam_search.hpp): this session's KV cache becomes src's, a session of the same context:
    // positions [from, src.length()) are copied on the device and the first `from` are taken to be equal already
    // (both hypotheses continue one prefix; from ≤ length()). The next step() continues at src.length().
    virtual void copy_cache(DeviceSession& src, int64_t from) {
        (void)src, (void)from;
        throw_unsupported("beam search");
    }
    // The backend's own session behind a wrapper (a pool's handle), for the backend's DeviceBatch.
    virtual DeviceSession* inner() { return this; }

protected:
    [[noreturn]] static void throw_unsupported(const char* what);
};

// One greedy decode step for several sessions of one DeviceContext at once: each weight is read once for all the
// rows. Row b is session s[b] fed tokens[b] at its next position; ids[b] and logprobs[b] get its greedy choice
// (ties → lowest id). A row's choice is the single-session step's except where the two best logits are within the
// products' rounding of each other: the batched products sum in another order. Not thread-safe: one engine thread.
class DeviceBatch {
public:
    virtual ~DeviceBatch() = default;
    virtual int max_batch() const = 0;
    virtual void step(DeviceSession* const* s, const int* tokens, size_t B, int* ids, float* logprobs) = 0;
    // The same step for beam search: ids/logprobs [B, k] (host) get each row's k best tokens (logit descending,
    // ties → lower id; 1 ≤ k ≤ 64) and their log-probabilities, chosen on the device; each session's KV cache is given
    // room for its row first.
    virtual void step_top(DeviceSession* const* s, const int* tokens, size_t B, int k, int* ids, float* logprobs) = 0;
};

class DeviceContext {
public:
    virtual ~DeviceContext() = default;
    // A session's device state (scratch, KV cache, stream, cuBLAS handle, captured graph) comes from a pool:
    // sessions returned by a finished request are reused, so warm-up keeps them built.
    // A session that ends holding more device memory in its length-dependent buffers (KV cache, prefill and encoder
    // scratch) than the pool limit (QASR_CUDA_POOL_LIMIT_MB, default 2048: requests up to 2–3 minutes of audio with the 0.6B model stay) is freed
    // instead; and an allocation that fails frees the idle ones before it gives up.
    virtual std::unique_ptr<DeviceSession> open() const = 0;
    // Device memory the idle pooled sessions hold in their length-dependent buffers.
    virtual size_t pooled_bytes() const { return 0; }
    virtual std::string name() const = 0;        // e.g. "cuda:0 (NVIDIA H200, sm_90)"
    virtual size_t weight_bytes() const = 0;     // device memory taken by the weights
    // A batched greedy step over this context's sessions (up to max_batch rows); null where the backend has none.
    // Batches given back (destroyed) are kept for the next open_batch of the same size, with their recorded steps.
    virtual std::unique_ptr<DeviceBatch> open_batch(int max_batch) const {
        (void)max_batch;
        return nullptr;
    }
};

// "cpu" (or "") → nullptr. "cuda" / "cuda:N" → the CUDA backend; throws a qasr::Error when qasr was built
// without it, no device is present, or the model cannot be placed there.
std::shared_ptr<const DeviceContext> open_device(const Model& model, const std::string& device);

// Starts creating the device's runtime context on another thread (it takes a few hundred ms) so that it overlaps
// with reading the checkpoint; join() waits for the context. The thread then loads kernels the first request
// would otherwise load on its path (beside the weights' upload); finish() and the destructor wait for that too.
// No-op for "cpu" and in builds without CUDA.
class DeviceWarmer {
public:
    explicit DeviceWarmer(const std::string& device);
    ~DeviceWarmer();
    void join();
    void finish();
    DeviceWarmer(const DeviceWarmer&) = delete;
    DeviceWarmer& operator=(const DeviceWarmer&) = delete;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// Whether this build has the CUDA backend, and how many CUDA devices it sees (0 without a driver).
bool built_with_cuda();
int cuda_device_count();
std::string cuda_device_description(int ordinal); // e.g. "NVIDIA H100 80GB HBM3, sm_90, 79.2 GiB, 132 SMs"

} // namespace qasr
