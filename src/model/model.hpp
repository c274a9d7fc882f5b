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
#include <string>
#include <vector>

namespace qasr {

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

    // device: "cpu" (default), "cuda", "cuda:N" (see backend/device.hpp).
    static std::shared_ptr<const Model> load(const std::string& dir, const std::string& device = "cpu");
    bool is_eos(int id) const { return std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end(); }
};

} // namespace qasr
