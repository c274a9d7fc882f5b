// The decode step as one persistent cooperative kernel (decode_persistent.cu). bf16 decoder weights only; the
// per-layer kernels (kernels.cuh) remain the path for quantized weights and unsupported shapes.
#pragma once
#include "backend/cuda/kernels.cuh"

namespace qasr::cuda {

struct PersistLayer {
    const uint16_t *qkv, *o, *gateup, *down; // bf16 [N, K]
    const float *in_norm, *post_norm, *q_norm, *k_norm;
    float *kc, *vc; // this layer's KV cache [cap, Hkv·hd]
};

struct PersistArgs {
    const PersistLayer* layers = nullptr; // device array [L]
    int L = 0, D = 0, Hq = 0, Hkv = 0, hd = 0, I = 0;
    int64_t V = 0;
    float eps = 1e-6f;
    const float* inv_freq = nullptr;
    const uint16_t* embed = nullptr; // bf16 [V, D]
    const uint16_t* head = nullptr;  // bf16 [V, D]
    const float* norm = nullptr;
    int *tok = nullptr, *pos = nullptr, *count = nullptr; // device ints, as the per-layer step uses them
    int2* ring = nullptr;
    int ring_size = 1;
    float *x = nullptr, *qkv = nullptr, *attn = nullptr, *h = nullptr, *logits = nullptr; // scratch
    int splits = 1;
    float* part = nullptr;      // ≥ Hq·splits·(hd + 2)
    unsigned* counter = nullptr; // ≥ Hkv, zero
    float* argpart = nullptr;   // ≥ 3·grid
};

bool persistent_step_supported(int Hq, int Hkv, int hd);
size_t persistent_step_smem(int D, int Hq, int hd, int I);
// Blocks that fit co-resident on the device (the cooperative grid).
int persistent_step_grid(int device, int hd, size_t smem);
// Token *tok at position *pos → logits, then greedy: *tok, ring[*count % ring_size], ++*count, ++*pos.
void persistent_step(const PersistArgs& a, int grid, size_t smem, cudaStream_t s);

} // namespace qasr::cuda
