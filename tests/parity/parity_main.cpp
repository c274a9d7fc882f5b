// qasr_parity: compares qasr (CPU, fp32) with transformers reference dumps (scripts/reference.py) at every tap
// point of spec §12.2, for both checkpoint layouts. Checkpoints come from the dump folder when it has them,
// else they are rebuilt from the seed (model/random_checkpoint). Exit status 0 only if every check passes.
//
//   qasr_parity --dumps DIR --work DIR [--tokenizer DIR] [--repo ROOT] [--layouts hf,original] [--cases a,b]
//               [--threads N] [--greedy-max N]   (N > 0: compare only the first N EOS-stopped greedy ids)
#include "parity_compare.hpp"

#include "model/random_checkpoint.hpp"
#include "ops/ops.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <map>
#include <tuple>
#include <set>
#include <sstream>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

std::set<std::string> split(const std::string& s) {
    std::set<std::string> out;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ',')) if (!x.empty()) out.insert(x);
    return out;
}

} // namespace

int main(int argc, char** argv) {
    std::map<std::string, std::string> a{{"--layouts", "hf,original"}, {"--repo", QASR_SOURCE_DIR},
                                         {"--tokenizer", QASR_TOKENIZER_DIR}, {"--work", "parity-work"}};
    for (int i = 1; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
    if (!a.count("--dumps")) {
        std::fprintf(stderr, "usage: qasr_parity --dumps DIR [--work DIR] [--tokenizer DIR] [--layouts hf,original]\n");
        return 2;
    }
    const std::string dumps = a["--dumps"];
    if (!fs::exists(dumps + "/manifest.json")) {
        std::printf("SKIP: no reference dumps at %s\n", dumps.c_str());
        return 77;
    }
    if (!fs::exists(a["--tokenizer"] + "/tokenizer.json")) {
        std::printf("SKIP: tokenizer not set up at %s (run scripts/setup_tokenizer.sh)\n", a["--tokenizer"].c_str());
        return 77;
    }
    if (a.count("--threads")) ops::set_num_threads(std::stoi(a["--threads"]));
    nlohmann::json man;
    std::ifstream(dumps + "/manifest.json") >> man;
    const uint64_t seed = man.value("seed", 1);
    const auto layouts = split(a["--layouts"]);
    const auto only = a.count("--cases") ? split(a["--cases"]) : std::set<std::string>{};
    int failures = 0, checks = 0;
    // Group the work by checkpoint so each model is loaded once.
    std::vector<std::tuple<std::string, std::string, const nlohmann::json*>> work; // dir, layout, case
    for (const std::string layout : {"hf", "original"}) {
        if (!layouts.count(layout)) continue;
        for (const auto& c : man["cases"]) {
            const std::string name = c["name"];
            if (!only.empty() && !only.count(name)) continue;
            const std::string preset = c["preset"];
            const std::string mname = preset + (layout == "hf" ? "-hf" : "-orig");
            std::string dir;
            if (man["models"].contains(mname) && man["models"][mname]["dir"].is_string() &&
                fs::exists(dumps + "/" + man["models"][mname]["dir"].get<std::string>() + "/config.json"))
                dir = dumps + "/" + man["models"][mname]["dir"].get<std::string>();
            else {
                dir = a["--work"] + "/" + mname;
                if (!fs::exists(dir + "/model.safetensors"))
                    write_random_checkpoint(dir, preset, layout, seed, a["--tokenizer"]);
            }
            work.emplace_back(dir, layout, &c);
        }
    }
    std::stable_sort(work.begin(), work.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
    const int greedy_max = a.count("--greedy-max") ? std::stoi(a["--greedy-max"]) : 0;
    std::shared_ptr<const Model> model;
    std::string model_dir;
    for (const auto& [dir, layout, cp] : work) {
        if (dir != model_dir) {
            model.reset(); // one model in memory at a time
            model = Model::load(dir);
            model_dir = dir;
        }
        const std::string name = (*cp)["name"];
        const ParityResult r = compare_case(model, *cp, dumps, a["--repo"], greedy_max);
        checks += r.checks;
        failures += r.failures;
        std::printf("%s %-28s %-8s %s\n", r.failures ? "FAIL" : "ok  ", name.c_str(), layout.c_str(), r.summary.c_str());
        for (const auto& line : r.details) std::printf("      %s\n", line.c_str());
        std::fflush(stdout);
    }
    std::printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
