// Host → device copies of the weights through pinned staging slots: host threads fill one slot while the copy
// engine drains the other. A plain cudaMemcpy from pageable memory goes through the driver's own single-threaded
// staging at ~5 GB/s (the 0.6B checkpoint's 1.6 GB took 0.27–0.38 s of every cold start on the H200 machine).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace qasr::cuda {

class StagedUpload {
public:
    StagedUpload();
    ~StagedUpload(); // waits for the copies in flight (so the destinations may be freed after it); never throws
    StagedUpload(const StagedUpload&) = delete;
    StagedUpload& operator=(const StagedUpload&) = delete;

    // Queues a copy of n bytes to device memory dst; src may be reused or freed once this returns.
    void copy(void* dst, const void* src, size_t n);
    // Every queued copy has reached the device.
    void finish();
    double fill_ms() const { return fill_ms_; } // host time copying into the slots
    double wait_ms() const { return wait_ms_; } // host time waiting for a slot's copies to finish

private:
    struct Seg {
        void* dst;
        size_t off, n;
    };
    struct Slot {
        char* host = nullptr;
        cudaEvent_t done = nullptr;
        bool pending = false; // copies from it were queued and done is recorded after them
        size_t used = 0;
        std::vector<Seg> segs;
    };
    void flush(); // queues the current slot's copies and moves to the other slot
    void fill(char* to, const char* from, size_t n) const;
    void release() noexcept;

    static constexpr size_t kSlot = size_t(32) << 20;
    Slot slots_[2];
    int cur_ = 0;
    cudaStream_t s_ = nullptr;
    unsigned threads_ = 1;
    bool direct_ = false; // no page-locked slots: plain cudaMemcpy per copy
    double fill_ms_ = 0, wait_ms_ = 0;
};

} // namespace qasr::cuda
