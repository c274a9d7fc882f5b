// The demo model's directory, the skip where its tokenizer is not installed, and its expected transcripts
// (models/demo/expected.tsv: transformers' output per clip), shared by the end-to-end tests.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace qasr_e2e {

inline const std::string kDemo = std::string(QASR_SOURCE_DIR) + "/models/demo";

struct Row {
    std::string path, language, text, raw;
};

inline std::vector<Row> expected() {
    std::vector<Row> rows;
    std::ifstream in(std::string(QASR_SOURCE_DIR) + "/models/demo/expected.tsv");
    std::string line;
    std::getline(in, line); // header: path language text raw reference
    while (std::getline(in, line)) {
        std::stringstream ss(line);
        Row r;
        std::getline(ss, r.path, '\t');
        std::getline(ss, r.language, '\t');
        std::getline(ss, r.text, '\t');
        std::getline(ss, r.raw, '\t');
        if (!r.path.empty()) rows.push_back(r);
    }
    return rows;
}

} // namespace qasr_e2e

#define NEED_DEMO_MODEL()                                                                                              \
    if (!std::filesystem::exists(qasr_e2e::kDemo + "/tokenizer.json"))                                                 \
    GTEST_SKIP() << "demo model tokenizer not installed: run scripts/build.sh"
