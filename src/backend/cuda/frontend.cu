// The front end on the device: log-mel (spec §3, in double like audio/mel) and the conv stem's im2col, flatten
// and sinusoid kernels (declarations and contracts in kernels.cuh).
#include "backend/cuda/check.hpp"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/gemm.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace qasr::cuda {
namespace {

using namespace detail;

__global__ void k_im2col_mel(const float* mel, int n_mels, int ld, int T, int cf, int C, int kpad, bf16* out) {
    const int Ho = (n_mels + 1) / 2, Wo = (cf + 1) / 2;
    const int64_t total = int64_t(C) * Ho * Wo * kpad;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int col = int(i % kpad);
        const int64_t p = i / kpad;
        const int wo = int(p % Wo), ho = int((p / Wo) % Ho), c = int(p / (int64_t(Wo) * Ho));
        float v = 0.0f;
        if (col < 9) {
            const int h = 2 * ho + col / 3 - 1, w = 2 * wo + col % 3 - 1;
            const int t = c * cf + w;
            if (h >= 0 && h < n_mels && w >= 0 && w < cf && t < T) v = mel[int64_t(h) * ld + t];
        }
        out[i] = __float2bfloat16(v);
    }
}

// One thread per 8 consecutive columns of an output row (column ci·9 + kh·3 + kw of the position's 3×3 window over
// channel ci), stored as one 16-byte write: the rows are written coalesced (the stem's 76 MB of columns), the
// inputs come from L1/L2 (each is read up to 9 times). 32-bit indices: the host checks the size. One thread per
// output element with 64-bit index arithmetic took 281 µs for the stem's larger call on the H200.
// VEC: columns per thread (8: one 16-byte store; 1 where Ch·9 is not a multiple of 8).
template <int VEC>
__global__ void k_im2col(const float* in, int C, int H, int W, int Ch, bf16* out) {
    const int Ho = (H + 1) / 2, Wo = (W + 1) / 2, K = Ch * 9, KG = K / VEC;
    const int total = C * Ho * Wo * KG;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int g = i % KG, pidx = i / KG;
        const int wo = pidx % Wo, t = pidx / Wo, ho = t % Ho, c = t / Ho;
        const float* src = in + int64_t(c) * H * W * Ch;
        __align__(16) bf16 v[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const int col = g * VEC + e, ci = col / 9, k = col % 9;
            const int h = 2 * ho + k / 3 - 1, w = 2 * wo + k % 3 - 1;
            v[e] = __float2bfloat16(h >= 0 && h < H && w >= 0 && w < W ? src[(h * W + w) * Ch + ci] : 0.0f);
        }
        if constexpr (VEC == 8) *reinterpret_cast<uint4*>(out + int64_t(pidx) * K + g * 8) = *reinterpret_cast<const uint4*>(v);
        else out[int64_t(pidx) * K + g] = v[0];
    }
}

__global__ void k_flatten(const float* c3, int C, int H3, int W3, int Ch, bf16* out) {
    const int64_t total = int64_t(C) * W3 * Ch * H3;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int col = int(i % (Ch * H3));
        const int64_t rt = i / (Ch * H3);
        const int t = int(rt % W3), c = int(rt / W3);
        const int ch = col / H3, f = col % H3;
        out[i] = __float2bfloat16(c3[((int64_t(c) * H3 + f) * W3 + t) * Ch + ch]);
    }
}

__global__ void k_add_pe(const float* co, int64_t total, int d, int W3, const float* pe, float* x) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / d;
        const int k = int(i % d);
        x[i] = co[i] + pe[(r % W3) * d + k];
    }
}

// Log-mel on the device: frames [T, 400] (reflect-padded, windowed) → DFT as an fp32 GEMM → power → mel GEMM →
// log10 → clip-global max − 8 clamp → (x + 4) / 4, transposed to [n_mels, T].
// frames t0 … t0+T-1 → frames [T, 400]
__global__ void k_mel_frames(const float* x, int64_t n_have, int64_t N, int t0, int T, const double* window, double* frames) {
    const int64_t total = int64_t(T) * 400;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = t0 + i / 400;
        const int j = int(i % 400);
        int64_t idx = t * 160 + j - 200;
        if (idx < 0) idx = -idx;
        if (idx >= N) idx = 2 * (N - 1) - idx;
        frames[i] = (idx < n_have ? double(x[idx]) : 0.0) * window[j];
    }
}

__global__ void k_power(const double* y, int64_t total, double* p) { // y [T, 402] (re, im interleaved) → p [T, 201]
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const double re = y[2 * i], im = y[2 * i + 1];
        p[i] = re * re + im * im;
    }
}

__global__ void k_log_max(const double* m, int64_t total, float* lm, float* part_max) {
    __shared__ float red[32];
    float mx = -FLT_MAX;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const float v = float(log10(fmax(m[i], 1e-10)));
        lm[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, red);
    if (threadIdx.x == 0) part_max[blockIdx.x] = mx;
}

__global__ void k_mel_norm(const float* lm, int T, int n_mels, const float* part_max, int parts, float* out) {
    __shared__ float red[32];
    float v = -FLT_MAX; // the maximum of the parts' maxima, by the whole block
    for (int b = threadIdx.x; b < parts; b += blockDim.x) v = fmaxf(v, part_max[b]);
    const float floor = block_max(v, red) - 8.0f;
    const int64_t total = int64_t(T) * n_mels;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int m = int(i / T), t = int(i % T);
        out[i] = (fmaxf(lm[int64_t(t) * n_mels + m], floor) + 4.0f) / 4.0f;
    }
}

} // namespace

namespace {
// The log-mel's work buffer: the double-precision stages of one block of B frames, then the float log-mel of all T
// frames and the blocks' partial maxima, each part starting on a 256-byte boundary (log_mel_work_bytes sizes it).
struct MelWork {
    size_t frames, spec, power, mel, lm, bmax, bytes; // byte offsets, total
    MelWork(int T, int n_mels) {
        const size_t B = size_t(std::min(T, kLogMelBlock)), blocks = (size_t(T) + kLogMelBlock - 1) / kLogMelBlock;
        const auto up = [](size_t b) { return (b + 255) & ~size_t(255); };
        frames = 0;
        spec = up(frames + B * 400 * 8);
        power = up(spec + B * 402 * 8);
        mel = up(power + B * 201 * 8);
        lm = up(mel + B * size_t(n_mels) * 8);
        bmax = up(lm + size_t(T) * size_t(n_mels) * 4);
        bytes = bmax + blocks * kLogMelParts * 4;
    }
};
} // namespace

void log_mel(detail::GemmPlans& g, const float* x, int64_t n_have, int64_t N, int T, int n_mels, const double* window,
             const double* dft, const double* filters, double* work, float* out, cudaStream_t s) {
    // the frames in blocks of kLogMelBlock: the double-precision work of one block (~9.5 KB a frame), then the
    // log-mel of all frames clamped below their maximum
    const int blocks = (T + kLogMelBlock - 1) / kLogMelBlock;
    const MelWork w(T, n_mels);
    char* base = reinterpret_cast<char*>(work);
    auto* frames = reinterpret_cast<double*>(base + w.frames); // [B, 400]
    auto* spec = reinterpret_cast<double*>(base + w.spec);     // [B, 402]
    auto* power = reinterpret_cast<double*>(base + w.power);   // [B, 201]
    auto* mel = reinterpret_cast<double*>(base + w.mel);       // [B, n_mels]
    auto* lm = reinterpret_cast<float*>(base + w.lm);          // [T, n_mels]
    auto* bmax = reinterpret_cast<float*>(base + w.bmax);      // [blocks, kLogMelParts]
    for (int b = 0; b < blocks; ++b) {
        const int t0 = b * kLogMelBlock, n = std::min(kLogMelBlock, T - t0);
        k_mel_frames<<<grid_for(int64_t(n) * 400), 256, 0, s>>>(x, n_have, N, t0, n, window, frames);
        QASR_CUDA_LAUNCHED();
        // row-major spec [n, 402] = frames [n, 400] · dft [400, 402]  (column-major: specᵀ = dftᵀ · framesᵀ)
        g.run_f64(402, n, 400, dft, 402, frames, 400, spec, 402, s);
        k_power<<<grid_for(int64_t(n) * 201), 256, 0, s>>>(spec, int64_t(n) * 201, power);
        QASR_CUDA_LAUNCHED();
        g.run_f64(n_mels, n, 201, filters, n_mels, power, 201, mel, n_mels, s);
        k_log_max<<<kLogMelParts, 256, 0, s>>>(mel, int64_t(n) * n_mels, lm + int64_t(t0) * n_mels,
                                                bmax + int64_t(b) * kLogMelParts);
        QASR_CUDA_LAUNCHED();
    }
    k_mel_norm<<<grid_for(int64_t(T) * n_mels), 256, 0, s>>>(lm, T, n_mels, bmax, blocks * kLogMelParts, out);
    QASR_CUDA_LAUNCHED();
}

std::vector<double> mel_dft_basis() {
    std::vector<double> dft(size_t(400 * 402));
    for (int j = 0; j < 400; ++j)
        for (int k = 0; k < 201; ++k) {
            const double ang = 2.0 * M_PI * double((j * k) % 400) / 400.0;
            dft[size_t(j * 402 + 2 * k)] = std::cos(ang);
            dft[size_t(j * 402 + 2 * k + 1)] = -std::sin(ang);
        }
    return dft;
}

size_t log_mel_work_bytes(int T, int n_mels) { return MelWork(T, n_mels).bytes; }

void im2col_mel(const float* mel, int n_mels, int ld, int T, int cf, int C, int kpad, bf16* out, cudaStream_t s) {
    const int64_t total = int64_t(C) * ((n_mels + 1) / 2) * ((cf + 1) / 2) * kpad;
    k_im2col_mel<<<grid_for(total), 256, 0, s>>>(mel, n_mels, ld, T, cf, C, kpad, out);
    QASR_CUDA_LAUNCHED();
}

void im2col(const float* in, int C, int H, int W, int Ch, bf16* out, cudaStream_t s) {
    const int64_t cols = int64_t(C) * ((H + 1) / 2) * ((W + 1) / 2) * Ch * 9;
    if (cols >= INT32_MAX || int64_t(C) * H * W * Ch >= INT32_MAX) fail("cuda", "encoder stem: too many convolution windows in one call");
    if (Ch % 8 == 0) k_im2col<8><<<grid_for(cols / 8), 256, 0, s>>>(in, C, H, W, Ch, out);
    else k_im2col<1><<<grid_for(cols), 256, 0, s>>>(in, C, H, W, Ch, out);
    QASR_CUDA_LAUNCHED();
}

void flatten_stem(const float* c3, int C, int H3, int W3, int Ch, bf16* out, cudaStream_t s) {
    const int64_t total = int64_t(C) * W3 * Ch * H3;
    k_flatten<<<grid_for(total), 256, 0, s>>>(c3, C, H3, W3, Ch, out);
    QASR_CUDA_LAUNCHED();
}

void add_pe(const float* co, int A, int d, int W3, const float* pe, float* x, cudaStream_t s) {
    const int64_t total = int64_t(A) * d;
    if (!total) return;
    k_add_pe<<<grid_for(total), 256, 0, s>>>(co, total, d, W3, pe, x);
    QASR_CUDA_LAUNCHED();
}

} // namespace qasr::cuda
