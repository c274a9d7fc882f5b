#include "pipeline/batch_engine.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "pipeline/session.hpp"

#include <algorithm>
#include <exception>

namespace qasr {

struct BatchEngine::Job {
    const std::vector<float>* audio = nullptr;
    const TranscribeOptions* opts = nullptr;
    std::unique_ptr<Session> session;
    int token = -1; // the token the next step feeds
    TranscriptionResult result;
    std::exception_ptr error;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
};

BatchEngine::BatchEngine(std::shared_ptr<const Model> model, int max_batch)
    : model_(std::move(model)), max_batch_(max_batch) {
    if (max_batch < 1 || max_batch > 1024) fail("options", "the decode batch must be in [1, 1024]");
    if (model_->device) {
        dev_ = model_->device->open_batch(max_batch);
        if (!dev_) fail("options", "batched decoding across requests is not available on " + model_->device->name());
        max_batch_ = std::min(max_batch, dev_->max_batch());
    }
    thread_ = std::thread([this] { loop(); });
}

BatchEngine::~BatchEngine() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

TranscriptionResult BatchEngine::run(const std::vector<float>& audio, const TranscribeOptions& opts) {
    if (opts.decode.beam_size > 1) return Session(model_).run(audio, opts); // its beams batch among themselves
    Job j;
    j.audio = &audio;
    j.opts = &opts;
    if (dev_) { // on a device: the front end, encoder and prefill here, on this request's own stream
        auto s = std::make_unique<Session>(model_);
        if (!Session::argmax_decoding(opts.decode)) return s->run(audio, opts); // sampling: its own loop
        if (!s->begin(audio, opts) || (j.token = s->begin_device_batch()) < 0) return s->finish();
        j.session = std::move(s);
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (stop_) fail("engine", "the batch engine is shutting down");
        queue_.push_back(&j);
    }
    cv_.notify_all();
    std::unique_lock<std::mutex> lk(j.mu);
    j.cv.wait(lk, [&] { return j.done; });
    if (j.error) std::rethrow_exception(j.error);
    return std::move(j.result);
}

BatchEngine::Stats BatchEngine::stats() const {
    std::lock_guard<std::mutex> lk(mu_);
    return stats_;
}

void BatchEngine::complete(Job* j) {
    if (!j->error && j->session) {
        try {
            j->result = j->session->finish();
        } catch (...) {
            j->error = std::current_exception();
        }
    }
    j->session.reset();
    std::lock_guard<std::mutex> lk(j->mu); // the caller may return as soon as done is set
    j->done = true;
    j->cv.notify_all();
}

// Starts the queued requests while there is room: each runs up to its first token's logits and chooses that token.
void BatchEngine::admit(std::vector<Job*>& active) {
    for (;;) {
        Job* j = nullptr;
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (stop_ || queue_.empty() || int(active.size()) >= max_batch_) return;
            j = queue_.front();
            queue_.pop_front();
        }
        if (j->session) { // begun on the caller's thread (a device model)
            active.push_back(j);
            continue;
        }
        try {
            j->session = std::make_unique<Session>(model_);
            if (j->session->begin(*j->audio, *j->opts) && (j->token = j->session->next(j->session->first_logits().ptr())) >= 0) {
                active.push_back(j);
                continue;
            }
        } catch (...) {
            j->error = std::current_exception();
        }
        complete(j);
    }
}

void BatchEngine::loop() {
    std::vector<Job*> active;
    std::vector<Session*> sessions;
    std::vector<int> tokens, ids;
    std::vector<float> lps;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !active.empty(); });
            if (stop_ && active.empty()) {
                for (Job* j : queue_) {
                    j->error = std::make_exception_ptr(Error("engine", "the batch engine shut down before the request ran"));
                    complete(j);
                }
                queue_.clear();
                return;
            }
        }
        admit(active);
        if (active.empty()) continue;
        sessions.clear();
        tokens.clear();
        for (Job* j : active) {
            sessions.push_back(j->session.get());
            tokens.push_back(j->token);
        }
        Tensor logits;
        try {
            if (dev_) {
                ids.resize(active.size());
                lps.resize(active.size());
                Session::step_batch_device(sessions.data(), tokens.data(), sessions.size(), *dev_, ids.data(), lps.data());
            } else {
                logits = Session::step_batch(sessions.data(), tokens.data(), sessions.size());
            }
        } catch (...) { // a step that fails (out of memory) fails the requests in it; the engine goes on
            for (Job* j : active) {
                j->error = std::current_exception();
                complete(j);
            }
            active.clear();
            continue;
        }
        {
            std::lock_guard<std::mutex> lk(mu_);
            ++stats_.steps;
            stats_.rows += long(active.size());
            stats_.max_batch_seen = std::max(stats_.max_batch_seen, int(active.size()));
        }
        size_t kept = 0;
        for (size_t b = 0; b < active.size(); ++b) {
            Job* j = active[b];
            try {
                j->token = dev_ ? j->session->next_chosen(ids[b], lps[b]) : j->session->next(logits.row(int64_t(b)));
            } catch (...) {
                j->error = std::current_exception();
                j->token = -1;
            }
            if (j->token < 0) complete(j);
            else active[kept++] = j;
        }
        active.resize(kept);
    }
}

} // namespace qasr
