// run_in_order: n jobs, up to `parallel` at once on worker threads, their results handed over in order on the
// calling thread as soon as each and all before it are done. Used for the pieces of one long request
// (api/transcriber.cpp) and the files of one `qasr transcribe` call, so that a batch engine decodes them together.
#pragma once
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace qasr {

// parallel <= 1: one after another on the calling thread. An exception from job k is rethrown once the jobs before
// it are handed over (jobs start in order, so those are done or in flight); one from take ends it once the jobs in
// flight finish. Jobs not started by then never start.
template <class R>
void run_in_order(size_t n, int parallel, const std::function<R(size_t)>& run, const std::function<void(R&)>& take) {
    if (parallel <= 1 || n <= 1) {
        for (size_t i = 0; i < n; ++i) {
            R r = run(i);
            take(r);
        }
        return;
    }
    std::vector<std::optional<R>> out(n);
    std::mutex m;
    std::condition_variable cv;
    size_t next = 0;
    bool stop = false;
    std::exception_ptr err; // the failed job of the lowest index: err_at
    size_t err_at = n;
    const auto worker = [&] {
        for (;;) {
            size_t i;
            {
                std::lock_guard<std::mutex> lk(m);
                if (stop || next == n) return;
                i = next++;
            }
            try {
                R r = run(i);
                std::lock_guard<std::mutex> lk(m);
                out[i] = std::move(r);
            } catch (...) {
                std::lock_guard<std::mutex> lk(m);
                if (i < err_at) err = std::current_exception(), err_at = i;
                stop = true;
            }
            cv.notify_all();
        }
    };
    std::vector<std::thread> team;
    const auto join = [&] {
        {
            std::lock_guard<std::mutex> lk(m);
            stop = true;
        }
        for (auto& t : team) t.join();
        team.clear();
    };
    try {
        for (size_t t = 0; t < std::min(n, size_t(parallel)); ++t) team.emplace_back(worker);
        for (size_t i = 0; i < n; ++i) {
            std::unique_lock<std::mutex> lk(m);
            cv.wait(lk, [&] { return out[i].has_value() || err_at <= i; });
            if (!out[i]) break; // job i failed
            R r = std::move(*out[i]);
            out[i].reset();
            lk.unlock();
            take(r);
        }
    } catch (...) {
        join();
        throw;
    }
    join();
    if (err) std::rethrow_exception(err);
}

} // namespace qasr
