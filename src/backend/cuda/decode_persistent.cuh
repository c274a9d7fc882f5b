// The decode step as one persistent cooperative kernel (decode_persistent.cu): bf16 decoder weights on sm_90; the
// per-layer kernels (kernels.cuh) remain the path for quantized weights, older GPUs and unsupported shapes.
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
    float* part = nullptr;      // ≥ Hq·splits·decode_partial_floats(hd); splits ≤ 16
    float* argpart = nullptr;   // ≥ 3·grid
    uint32_t slot_bytes = 0;    // set by persistent_step from the plan
    unsigned long long* prof = nullptr; // optional [16]: ns per phase kind (block 0), see decode_persistent.cu
};

struct PersistLaunch {
    int grid = 0;            // one block per SM
    size_t smem = 0;         // dynamic shared memory per block
    uint32_t slot_bytes = 0; // one slot of the weight ring
};

// sm_90+, a head_dim the decode-attention body takes, rows of a multiple of 16 bytes.
bool persistent_step_supported(int device, int D, int Hq, int Hkv, int hd, int I);
// Grid and shared-memory ring for this model on this device (throws when the rows do not fit the ring).
PersistLaunch persistent_step_plan(int device, int L, int D, int Hq, int hd, int I);
// Token *tok at position *pos → logits, then greedy: *tok, ring[*count % ring_size], ++*count, ++*pos.
void persistent_step(const PersistArgs& a, const PersistLaunch& p, cudaStream_t s);

} // namespace qasr::cuda
