// Model: everything immutable about a loaded checkpoint — hyperparameters, weights, tokenizer, special ids,
// the mel front end. Shared (const) between any number of sessions and threads.
#pragma once
#include "audio/mel.hpp"
#include "backend/device.hpp"
#include "io/config.hpp"
#include "model/weights.hpp"
#include "text/prompt.hpp"
#include "text/tokenizer.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace qasr {

namespace ops {
struct HeadScreen;
}

// Derived data computed on first use (thread-safe), shared by copies of the Model.
struct ModelCaches {
    std::once_flag head_once;
    std::shared_ptr<const ops::HeadScreen> head;
};

struct Model {
    std::string dir;
    HParams hp;
    ModelWeights weights;
    Tokenizer tokenizer;
    SpecialIds special;
    std::vector<int> eos_ids;
    MelFrontend mel;
    double load_ms = 0;
    std::shared_ptr<const DeviceContext> device; // null: the CPU ops; else the accelerator holding the weights

    // device: "cpu" (default), "cuda", "cuda:N" (see backend/device.hpp). compute: the CPU's matrix-matrix products
    // (LoadOptions::compute): "auto" (bf16 for quantized checkpoints, float32 for float ones), "bf16" or "f32".
    static std::shared_ptr<const Model> load(const std::string& dir, const std::string& device = "cpu",
                                             const std::string& compute = "auto");
    bool is_eos(int id) const { return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end(); }
    // A prompt of `prompt` tokens decoding up to `cap` more must fit the positions the decoder was trained for
    // (text_config.max_position_embeddings, 65536 for Qwen3-ASR; RoPE beyond it is untrained): else an Error naming
    // the parts (the context's tokens among them) and what to shorten. `what`: "the request", "the stream" …
    void check_positions(int64_t prompt, int64_t cap, const std::string& context, const char* what) const;
    // Row norms of the LM head for the screened greedy choice over several rows (ops::head_screen; null where it
    // does not apply), computed on the first call (one pass over the head).
    const ops::HeadScreen* head_screen() const;
    std::shared_ptr<ModelCaches> caches = std::make_shared<ModelCaches>();
};

} // namespace qasr
