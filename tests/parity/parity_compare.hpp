// Per-case comparison of qasr against one reference dump (tolerances of the core-engine issue):
// mel max|Δ| ≤ 1e-4; every encoder/decoder tap relative L2 ≤ 1e-4; prefill logits max|Δ| ≤ 5e-3 with identical
// argmax; forced greedy ids (64 steps) and EOS-stopped greedy ids identical.
#pragma once
#include "model/model.hpp"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

struct ParityResult {
    int checks = 0, failures = 0;
    std::string summary;
    std::vector<std::string> details; // one line per failed check
};

ParityResult compare_case(const std::shared_ptr<const qasr::Model>& model, const nlohmann::json& c,
                          const std::string& dumps_dir, const std::string& repo_root, int greedy_max = 0);
