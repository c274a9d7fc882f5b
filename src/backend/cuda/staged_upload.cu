// StagedUpload (see staged_upload.hpp).
#include "backend/cuda/staged_upload.hpp"

#include "backend/cuda/check.hpp"
#include "core/timer.hpp"

#include <algorithm>
#include <cstring>
#include <thread>

namespace qasr::cuda {

StagedUpload::StagedUpload() {
    threads_ = std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u);
    try {
        QASR_CUDA(cudaStreamCreate(&s_));
        for (Slot& sl : slots_) {
            // Where page-locked memory is refused (a locked-memory limit), the copies go the driver's way.
            if (cudaHostAlloc(reinterpret_cast<void**>(&sl.host), kSlot, cudaHostAllocDefault) != cudaSuccess) {
                cudaGetLastError();
                sl.host = nullptr;
                direct_ = true;
            }
            QASR_CUDA(cudaEventCreateWithFlags(&sl.done, cudaEventDisableTiming));
        }
    } catch (...) {
        release();
        throw;
    }
}

StagedUpload::~StagedUpload() { release(); }

void StagedUpload::release() noexcept {
    if (s_) cudaStreamSynchronize(s_);
    for (Slot& sl : slots_) {
        if (sl.host) cudaFreeHost(sl.host);
        if (sl.done) cudaEventDestroy(sl.done);
        sl.host = nullptr;
        sl.done = nullptr;
    }
    if (s_) cudaStreamDestroy(s_);
    s_ = nullptr;
    cudaGetLastError(); // errors here were (or will be) reported by the calls that caused them
}

void StagedUpload::fill(char* to, const char* from, size_t n) const {
    const size_t kMin = size_t(2) << 20; // below this one thread copies faster than several start
    if (threads_ < 2 || n < 2 * kMin) {
        std::memcpy(to, from, n);
        return;
    }
    const unsigned t = unsigned(std::min<size_t>(threads_, n / kMin));
    const size_t part = (n / t + 4095) & ~size_t(4095);
    std::vector<std::thread> helpers; // helper i copies [i·part, (i+1)·part), this thread the first part
    helpers.reserve(t - 1);
    try {
        for (unsigned i = 1; i < t && i * part < n; ++i)
            helpers.emplace_back([=] { std::memcpy(to + i * part, from + i * part, std::min(n, (i + 1) * part) - i * part); });
    } catch (...) { // no thread to be had: what no helper took is copied here
    }
    std::memcpy(to, from, std::min(n, part));
    const size_t handed = (helpers.size() + 1) * part;
    if (handed < n) std::memcpy(to + handed, from + handed, n - handed);
    for (auto& h : helpers) h.join();
}

void StagedUpload::copy(void* dst, const void* src, size_t n) {
    if (direct_) {
        const Stopwatch sw;
        QASR_CUDA(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
        fill_ms_ += sw.ms();
        return;
    }
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    while (n > 0) {
        Slot& sl = slots_[cur_];
        if (sl.used == kSlot) {
            flush();
            continue;
        }
        const size_t take = std::min(n, kSlot - sl.used);
        const Stopwatch sw;
        fill(sl.host + sl.used, s, take);
        fill_ms_ += sw.ms();
        sl.segs.push_back({d, sl.used, take});
        sl.used += take;
        d += take;
        s += take;
        n -= take;
    }
}

void StagedUpload::flush() {
    Slot& sl = slots_[cur_];
    if (sl.used > 0) {
        for (const Seg& g : sl.segs)
            QASR_CUDA(cudaMemcpyAsync(g.dst, sl.host + g.off, g.n, cudaMemcpyHostToDevice, s_));
        QASR_CUDA(cudaEventRecord(sl.done, s_));
        sl.pending = true;
    }
    cur_ ^= 1;
    Slot& next = slots_[cur_];
    const Stopwatch sw;
    if (next.pending) QASR_CUDA(cudaEventSynchronize(next.done)); // its copies have left the slot
    wait_ms_ += sw.ms();
    next.pending = false;
    next.used = 0;
    next.segs.clear();
}

void StagedUpload::finish() {
    if (direct_) return;
    flush();
    const Stopwatch sw;
    QASR_CUDA(cudaStreamSynchronize(s_));
    wait_ms_ += sw.ms();
}

} // namespace qasr::cuda
