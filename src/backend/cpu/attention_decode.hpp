// Single-query attention over a KV cache (the decode step), for a range of KV heads: used by
// ops::causal_attention per thread and by the fused decode step (backend/cpu/decode_step_cpu.cpp) per thread.
#pragma once
#include "backend/cpu/kernels.hpp"
#include "ops/ops.hpp"

#include <cstdint>

namespace qasr::cpu {

// o = softmax(scale · q·kᵀ) · v for one query over positions [0, len) of KV heads [c0, c1) and the query heads
// c0·group … c1·group − 1 that share them. q, o: the full rows [Hq·hd] (only those heads are read / written);
// s: scratch of (c1 − c0)·group·len floats. A float32 cache keeps ops::softmax_row (the reference arithmetic); a
// bf16 cache (quantized checkpoints) takes the table's vectorized softmax.
void attend_one(const KernelTable& K, const float* q, const ops::KvView& kv, float* o, int64_t len, int64_t c0,
                int64_t c1, int64_t group, int64_t hd, float scale, float* s);

} // namespace qasr::cpu
