// The model's weights on one CUDA device, uploaded once from the host Model. Decoder matrices keep their
// compute format (bf16, or MLX 4/6/8-bit codes + scales + biases for the fused dequantizing matrix-vector
// kernels); q/k/v and gate/up are concatenated row-wise so one kernel serves each group. Encoder matrices and
// conv weights become bf16 for cuBLAS; norms and biases stay float32.
#pragma once
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.cuh"
#include "model/model.hpp"

#include <vector>

namespace qasr::cuda {

struct DevEncLayer {
    DMat qkv, o, fc1, fc2; // bf16
    const float *qkv_b, *o_b, *fc1_b, *fc2_b;
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
};

struct DevDecLayer {
    DMat qkv, o, gateup, down;
    const float *in_norm, *post_norm, *q_norm, *k_norm;
};

struct DeviceWeights {
    int ordinal = 0;
    // encoder
    const bf16 *conv1_w, *conv2_w, *conv3_w; // [Ch, 16] (9 taps zero-padded), [Ch, Ch·9], [Ch, Ch·9]
    const float *conv1_b, *conv2_b, *conv3_b;
    DMat conv_out;
    std::vector<DevEncLayer> enc;
    const float *ln_post_w, *ln_post_b;
    DMat proj1, proj2;
    const float *proj1_b, *proj2_b;
    const float* pe; // sinusoids [W3, d]
    const double *mel_window, *mel_dft, *mel_filters; // [400], [400, 402], [201, n_mels] in double
    // decoder
    DMat embed, head; // head = embed when tied
    HeadScreen head_screen; // the greedy step's screened head (bf16 heads on sm_90; off with QASR_CUDA_HEAD_SCREEN=0)
    std::vector<DevDecLayer> dec;
    const float* norm;
    const float* inv_freq; // [head_dim / 2]
    size_t bytes = 0;
    std::vector<Buffer> storage;

    static std::unique_ptr<DeviceWeights> upload(const Model& m, int ordinal);
};

} // namespace qasr::cuda
