// Shared by the CUDA test files: random data, device buffers, the bf16 and MLX-quantized test matrices, the
// random checkpoints, and NEED_GPU (skip where no CUDA device is present).
#pragma once
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.cuh"
#include "backend/device.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/quant.hpp"
#include "model/random_checkpoint.hpp"
#include "audio/mel.hpp"
#include "ops/ops.hpp"
#include "pipeline/session.hpp"
#include "pipeline/stream.hpp"
#include "audio/audio.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <cstdio>
#include <random>
#include <thread>
#include <unistd.h>

namespace qasr::cuda::test {

// The test binary is carried to the GPU machine, where the tree may sit elsewhere: QASR_TOKENIZER_DIR overrides the
// build-time tokenizer path.
inline std::string tokenizer_dir() {
    const char* env = std::getenv("QASR_TOKENIZER_DIR");
    return env && *env ? env : QASR_TOKENIZER_DIR;
}

// A random checkpoint of `preset` in a per-process temporary folder (written once).
inline std::string random_checkpoint_dir(const std::string& preset, uint64_t seed, const std::string& tok_dir) {
    const std::string dir =
        (std::filesystem::temp_directory_path() / ("qasr_cuda_" + preset + "_" + std::to_string(::getpid()))).string();
    if (!std::filesystem::exists(dir + "/model.safetensors")) write_random_checkpoint(dir, preset, "hf", seed, tok_dir);
    return dir;
}

#define NEED_GPU()                                                                                                 \
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: the CUDA tests run on a GPU machine only"

// A GPU and the tokenizer (random checkpoints carry it), else the test skips; then `dir`: the random checkpoint of
// `preset` with `seed`, written once per process.
#define NEED_GPU_CHECKPOINT(dir, preset, seed)                                                                     \
    NEED_GPU();                                                                                                    \
    if (!std::filesystem::exists(tokenizer_dir() + "/tokenizer.json"))                                             \
        GTEST_SKIP() << "tokenizer not set up (scripts/setup_tokenizer.sh) in " << tokenizer_dir();                \
    const std::string dir = random_checkpoint_dir(preset, seed, tokenizer_dir())

// The device's compute capability major version (the current device).
inline int device_major() {
    int dev = 0, major = 0;
    QASR_CUDA(cudaGetDevice(&dev));
    QASR_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major;
}
// A GPU with the prefetching products (sm_90: bulk copies), prepared for them; else the test skips.
#define NEED_PREFETCH_GPU()                                                                                        \
    NEED_GPU();                                                                                                    \
    if (device_major() < 9) GTEST_SKIP() << "the prefetching matrix-vector kernel needs sm_90 (bulk copies)";      \
    {                                                                                                              \
        int dev_ = 0;                                                                                              \
        QASR_CUDA(cudaGetDevice(&dev_));                                                                           \
        matvec_prefetch_prepare(dev_);                                                                             \
    }

inline std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 g(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = u(g);
    return v;
}
inline uint16_t bf16_bits(float f) { return f32_to_bf16(f); }
inline float bf16_round(float f) { return bf16_to_f32(f32_to_bf16(f)); }

struct Dev {
    Buffer b;
    template <class T> explicit Dev(const std::vector<T>& v) : b(v.size() * sizeof(T)) {
        QASR_CUDA(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    }
    explicit Dev(size_t bytes) : b(bytes) { QASR_CUDA(cudaMemset(b.get(), 0, bytes)); }
    template <class T> T* p() const { return b.as<T>(); }
};
inline std::vector<float> host(const Dev& d, size_t n) {
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<float> v(n);
    QASR_CUDA(cudaMemcpy(v.data(), d.b.get(), n * 4, cudaMemcpyDeviceToHost));
    return v;
}
// How many of the bf16 values on the device at d differ from the float32 values f rounded to bf16 (the kernels'
// bf16 outputs must be their float32 outputs rounded, bit for bit).
inline size_t bf16_mismatches(const Dev& d, const std::vector<float>& f) {
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> h(f.size());
    QASR_CUDA(cudaMemcpy(h.data(), d.b.get(), h.size() * 2, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < h.size(); ++i) {
        const __nv_bfloat16 want = __float2bfloat16(f[i]);
        uint16_t wb;
        std::memcpy(&wb, &want, 2);
        bad += h[i] != wb;
    }
    return bad;
}
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        den += double(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-30));
}

// A bf16 matrix: bits on the device, the same values as float32 for the CPU reference.
struct Bf16Mat {
    std::vector<float> f;
    std::vector<uint16_t> bits;
    Bf16Mat(int64_t n, int64_t k, uint32_t seed) : f(randv(size_t(n * k), seed, 0.1f)) {
        for (auto& x : f) x = bf16_round(x);
        for (float x : f) bits.push_back(bf16_bits(x));
    }
};

// An MLX affine-quantized matrix of w [rows, cols] on the device (codes, bf16 scales and biases) with its dequantized
// values for the CPU reference.
struct QuantDevMat {
    std::vector<float> f; // dequantized, as the device reads them
    Dev codes, scales, biases;
    DMat m;
    static std::vector<uint16_t> bits_of(const std::vector<float>& v) {
        std::vector<uint16_t> b;
        for (float x : v) b.push_back(bf16_bits(x));
        return b;
    }
    QuantDevMat(const AffineQuantized& q, std::vector<uint16_t> sc, std::vector<uint16_t> bi, int rows, int cols, int bits,
                int gs)
        : codes(q.packed), scales(sc), biases(bi) {
        WeightMatrix cw;
        cw.fmt = WFormat::Q, cw.rows = rows, cw.cols = cols, cw.bits = bits, cw.group_size = gs;
        cw.data = q.packed.data(), cw.scales = sc.data(), cw.biases = bi.data();
        f = cw.to_f32();
        m.bits = bits, m.rows = rows, m.cols = cols, m.gs = gs, m.data = codes.p<void>();
        m.scales = scales.p<bf16>(), m.biases = biases.p<bf16>();
    }
    QuantDevMat(const AffineQuantized& q, int rows, int cols, int bits, int gs)
        : QuantDevMat(q, bits_of(q.scales), bits_of(q.biases), rows, cols, bits, gs) {}
    QuantDevMat(const std::vector<float>& w, int rows, int cols, int bits, int gs)
        : QuantDevMat(quantize_affine(w.data(), rows, cols, bits, gs), rows, cols, bits, gs) {}
};

} // namespace qasr::cuda::test
