// The model's weights in compute form, one struct per module, shapes in comments. Matrices are WeightMatrix
// (f32, bf16 or MLX affine 4/6/8-bit, memory-mapped where the stored format is the compute format); norms,
// biases and convolutions are float32 Tensors.
// load_weights() checks the whole weight table (names, shapes, dtypes) against the hyperparameters before any
// conversion and reports every problem in one error.
#pragma once
#include "core/tensor.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "ops/weight.hpp"

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace qasr {

struct Linear {
    WeightMatrix w; // [out, in]
    Tensor b;       // [out] or empty
    int64_t out() const { return w.rows; }
    int64_t in() const { return w.cols; }
};

struct LayerNormW {
    Tensor w, b; // [d]
};

struct EncoderLayerW {
    LayerNormW attn_norm;       // self_attn_layer_norm
    Linear q, k, v, o;          // [d, d] + bias
    LayerNormW ffn_norm;        // final_layer_norm
    Linear fc1;                 // [F, d]
    Linear fc2;                 // [d, F]
};

struct EncoderW {
    Tensor conv1_w, conv1_b;    // [C, 1, 3, 3], [C]   (OIHW: H = mel, W = time)
    Tensor conv2_w, conv2_b;    // [C, C, 3, 3], [C]
    Tensor conv3_w, conv3_b;    // [C, C, 3, 3], [C]
    Linear conv_out;            // [d, C*F3], no bias
    std::vector<EncoderLayerW> layers;
    LayerNormW ln_post;         // [d]
    Linear proj1;               // [d, d]
    Linear proj2;               // [O, d]
    bool bf16_compute = false;  // matrix-matrix products may round activations to bf16 (quantized checkpoints)
};

struct DecoderLayerW {
    Tensor in_norm;             // [D]
    Linear q;                   // [Hq*hd, D]
    Linear k, v;                // [Hkv*hd, D]
    Linear o;                   // [D, Hq*hd]
    Tensor q_norm, k_norm;      // [hd]
    Tensor post_norm;           // [D]
    Linear gate, up;            // [I, D]
    Linear down;                // [D, I]
};

struct DecoderW {
    WeightMatrix embed;         // [V, D]
    std::vector<DecoderLayerW> layers;
    Tensor norm;                // [D]
    WeightMatrix lm_head;       // [V, D]; empty when tied to embed
    bool bf16_compute = false;  // see EncoderW::bf16_compute
};

struct ModelWeights {
    EncoderW enc;
    DecoderW dec;
    std::string scheme; // "hf" | "original" | "mlx"
};

// Converts a stored float tensor (F32/F16/BF16) to float32.
void to_f32(const TensorRef& t, float* out);

ModelWeights load_weights(const TensorStore& store, const HParams& hp);

// Canonical (-hf) names and shapes of every tensor the model needs (tied LM head not included).
std::vector<std::pair<std::string, std::vector<int64_t>>> weight_table(const HParams& hp);

// Visits every tensor of loaded weights in table order with its canonical (-hf) name: exactly one of t (norms,
// biases, convolutions in OIHW) and m (matrices) is non-null. A separate lm_head is visited last when present.
using WeightVisitor = std::function<void(const std::string& canonical, const std::vector<int64_t>& shape,
                                         const Tensor* t, const WeightMatrix* m)>;
void for_each_weight(const ModelWeights& w, const HParams& hp, const WeightVisitor& fn);

// Stored-name scheme of a checkpoint and the mapping from canonical (-hf) names.
std::string detect_scheme(const TensorStore& store);
std::string stored_name(const std::string& canonical, const std::string& scheme);

} // namespace qasr
