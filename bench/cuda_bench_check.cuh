// Error checks of the stand-alone CUDA micro-benchmarks (bench/*.cu): a failed call prints the statement and the
// error, and the benchmark exits (they are programs, not library code: qasr's own calls go through QASR_CUDA).
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                                       \
    do {                                                                                                            \
        const cudaError_t e_ = (x);                                                                                 \
        if (e_ != cudaSuccess) {                                                                                    \
            std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                           \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)

// cuBLAS / cuBLASLt status (include cublas_v2.h first)
#define CB(x)                                                                                                       \
    do {                                                                                                            \
        const cublasStatus_t s_ = (x);                                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                          \
            std::fprintf(stderr, "%s: status %d\n", #x, int(s_));                                                   \
            std::exit(1);                                                                                           \
        }                                                                                                           \
    } while (0)
