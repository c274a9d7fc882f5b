// The Transcriber's private state, visible to in-tree tools (bench, streaming) but not to API users.
#pragma once
#include "model/model.hpp"
#include "pipeline/batch_engine.hpp"
#include "qasr/qasr.hpp"

#include <memory>

namespace qasr {

// LoadOptions checked (threads, max_batch, compute) and the thread count applied; shared by Transcriber and Aligner.
void check_load_options(const LoadOptions& opts);
std::string model_summary(const Model& m);

struct Transcriber::Impl {
    std::shared_ptr<const Model> model;
    std::unique_ptr<BatchEngine> engine; // LoadOptions::max_batch > 1 (CPU or device)
    int max_batch = 1;                   // LoadOptions::max_batch: also the pieces of one request run at once
};

} // namespace qasr
