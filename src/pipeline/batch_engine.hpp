// BatchEngine: concurrent requests decode together (continuous batching), on the CPU or a GPU.
//
// A decode step of one request streams every weight of the decoder and the LM head from memory for one row of
// work; the CPU spends that step waiting for memory. The engine runs the requests that callers submit from any
// number of threads on ONE thread (with the whole OpenMP team): a new request's front end, encoder and prefill run
// as soon as it arrives (between two steps), then it joins the batch, and every step advances all requests in the
// batch by one token with one pass over the weights (ops::decode_step_batch). A request leaves the batch when its
// transcript ends; the others go on. Each request keeps its own Session (KV cache, sampler seed), and row b of a
// batched step is bit for bit its single-request step, so a transcript does not depend on what else was running.
//
// On a GPU (DeviceContext::open_batch) the same loop drives the device's batched step: each request's encoder and
// prefill run on its own thread and stream, then its rows join the batch, whose step reads every weight once for
// all of them (products with M = B rows). There a row's sums run in another order than a lone request's step, so
// its token can differ from the unbatched one where the two best logits are within rounding of each other.
#pragma once
#include "model/model.hpp"
#include "qasr/qasr.hpp"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace qasr {

class BatchEngine {
public:
    // max_batch: requests decoding together at most (≥ 1; more wait for a place; a device may hold fewer: its
    // DeviceBatch::max_batch). On a device model (greedy requests; sampled ones run alone on their caller's
    // thread) the front end, encoder and prefill run on the caller's thread and session stream, and only the
    // decode steps on the engine's thread, through the device's DeviceBatch.
    BatchEngine(std::shared_ptr<const Model> model, int max_batch);
    ~BatchEngine(); // requests still queued fail with an error; the ones running finish first
    BatchEngine(const BatchEngine&) = delete;
    BatchEngine& operator=(const BatchEngine&) = delete;

    // Transcribes one piece of audio (Session::run's contract and errors); blocks the calling thread until done.
    // Thread-safe. A beam search request (DecodeOptions::beam_size > 1) runs alone on the calling thread: its beams
    // are the rows of its own batched steps.
    TranscriptionResult run(const std::vector<float>& audio, const TranscribeOptions& opts);

    struct Stats {
        long steps = 0;        // batched decode steps run
        long rows = 0;         // Σ batch size over those steps
        int max_batch_seen = 0;
    };
    Stats stats() const;

private:
    struct Job;
    void loop();
    void admit(std::vector<Job*>& active);
    static void complete(Job* j);

    std::shared_ptr<const Model> model_;
    std::unique_ptr<DeviceBatch> dev_; // a device model's batched step (null on the CPU)
    int max_batch_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Job*> queue_;
    bool stop_ = false;
    Stats stats_;
    std::thread thread_;
};

} // namespace qasr
