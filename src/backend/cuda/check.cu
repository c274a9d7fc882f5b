#include "backend/cuda/check.hpp"

#include "core/error.hpp"

#include <string>

namespace qasr::cuda {

namespace {
std::string where(const char* stmt, const char* file, int line) {
    int dev = -1;
    cudaGetDevice(&dev);
    std::string f = file;
    const size_t s = f.rfind("/src/");
    if (s != std::string::npos) f = f.substr(s + 1);
    return std::string(stmt) + " on cuda:" + std::to_string(dev) + " at " + f + ":" + std::to_string(line);
}
} // namespace

void throw_cuda(cudaError_t e, const char* stmt, const char* file, int line) {
    std::string msg = std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ") in " + where(stmt, file, line);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError(); // clear the sticky-free error so the process can go on
        size_t free_b = 0, total_b = 0;
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
            msg += "; out of device memory: " + std::to_string(free_b >> 20) + " MiB free of " +
                   std::to_string(total_b >> 20) + " MiB";
        throw OutOfMemory("cuda", msg);
    }
    fail("cuda", msg);
}

void throw_cublas(cublasStatus_t s, const char* stmt, const char* file, int line) {
    fail("cublas", std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ") in " +
                       where(stmt, file, line));
}

void Buffer::alloc(size_t bytes) {
    reset();
    if (bytes == 0) return;
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) { // idle pooled sessions' memory first, then once more
        cudaGetLastError();
        if (release_idle_sessions() > 0) e = cudaMalloc(&p, bytes);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        const std::string msg = "cudaMalloc of " + std::to_string(bytes >> 20) + " MiB failed: " + cudaGetErrorString(e) +
                                " (" + std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) + " MiB)";
        if (e == cudaErrorMemoryAllocation) throw OutOfMemory("cuda", msg);
        fail("cuda", msg);
    }
    p_ = p;
    n_ = bytes;
}

void Buffer::reset() noexcept {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
}

} // namespace qasr::cuda
