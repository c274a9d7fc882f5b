// Every CUDA runtime and cuBLAS call goes through QASR_CUDA / QASR_CUBLAS: a failure becomes a qasr::Error naming
// the statement, the device, file:line and the error string (out-of-memory adds how much was free). Nothing aborts.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

namespace qasr::cuda {

[[noreturn]] void throw_cuda(cudaError_t e, const char* stmt, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t s, const char* stmt, const char* file, int line);

inline void check(cudaError_t e, const char* stmt, const char* file, int line) {
    if (e != cudaSuccess) throw_cuda(e, stmt, file, line);
}
inline void check(cublasStatus_t s, const char* stmt, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) throw_cublas(s, stmt, file, line);
}

// Frees every CUDA context's idle pooled sessions and batches, all their device memory (cuda_session.cu); returns
// how many it freed. A failed allocation asks for it once before it gives up.
size_t release_idle_sessions();

// Device memory owned by one object (moved, never copied). Out of memory: qasr::OutOfMemory.
class Buffer {
public:
    Buffer() = default;
    explicit Buffer(size_t bytes) { alloc(bytes); }
    Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    Buffer& operator=(Buffer&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    ~Buffer() { reset(); }
    void alloc(size_t bytes);     // frees the old storage first
    void ensure(size_t bytes) {   // grows (contents lost) when smaller than bytes
        if (bytes > n_) alloc(bytes);
    }
    void reset() noexcept;
    template <class T> T* as() const { return static_cast<T*>(p_); }
    void* get() const { return p_; }
    size_t size() const { return n_; }

private:
    void* p_ = nullptr;
    size_t n_ = 0;
};

} // namespace qasr::cuda

#define QASR_CUDA(stmt) ::qasr::cuda::check((stmt), #stmt, __FILE__, __LINE__)
#define QASR_CUBLAS(stmt) ::qasr::cuda::check((stmt), #stmt, __FILE__, __LINE__)
// After a kernel launch: launch-configuration errors surface here, execution errors at the next sync.
#define QASR_CUDA_LAUNCHED() ::qasr::cuda::check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
