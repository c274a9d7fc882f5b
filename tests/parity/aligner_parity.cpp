// qasr_aligner_parity: qasr's forced alignment (CPU, fp32) against transformers' Qwen3ASRForTokenClassification
// dumps (scripts/reference_aligner.py; committed: tests/data/ref_aligner, the aligner-tiny preset). Per case and
// checkpoint layout (hf, original; rebuilt from the seed): the aligner's input ids, the word list, the top-8
// classes at every <timestamp> (ids where the reference's values are apart, values within 1e-3), the argmax
// classes, the repaired timestamps and the words' times. Exit status 0 only if every check passes; 77: skipped.
//
//   qasr_aligner_parity --dumps DIR [--work DIR] [--tokenizer DIR] [--repo ROOT]
#include "audio/audio.hpp"
#include "io/safetensors.hpp"
#include "model/random_checkpoint.hpp"
#include "model/weights.hpp"
#include "pipeline/align.hpp"
#include "pipeline/session.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

std::vector<int64_t> read_i64(const TensorRef& t) {
    std::vector<int64_t> v(t.numel());
    std::memcpy(v.data(), t.data, v.size() * 8);
    return v;
}

struct Counter {
    int checks = 0, failures = 0;
    void check(bool ok, const std::string& what) {
        ++checks;
        if (!ok) {
            ++failures;
            std::printf("      FAIL %s\n", what.c_str());
        }
    }
};

} // namespace

int main(int argc, char** argv) {
    std::map<std::string, std::string> a{{"--repo", QASR_SOURCE_DIR}, {"--tokenizer", QASR_TOKENIZER_DIR},
                                         {"--work", "aligner-parity-work"}};
    for (int i = 1; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
    const std::string dumps = a["--dumps"];
    if (dumps.empty() || !fs::exists(dumps + "/manifest.json")) {
        std::printf("SKIP: no aligner reference dumps at '%s'\n", dumps.c_str());
        return 77;
    }
    if (!fs::exists(a["--tokenizer"] + "/tokenizer.json")) {
        std::printf("SKIP: tokenizer not set up at %s (run scripts/setup_tokenizer.sh)\n", a["--tokenizer"].c_str());
        return 77;
    }
    nlohmann::json man;
    std::ifstream(dumps + "/manifest.json") >> man;
    if (man.value("dtype", "") != "float32") {
        std::printf("FAIL: the committed aligner dumps must be float32 (got %s)\n", man.value("dtype", "?").c_str());
        return 1;
    }
    Counter c;
    for (const std::string layout : {"hf", "original"}) {
        const std::string dir = a["--work"] + "/" + man["preset"].get<std::string>() + "-" + layout;
        if (!fs::exists(dir + "/model.safetensors"))
            write_random_checkpoint(dir, man["preset"], layout, man.value("seed", 1), a["--tokenizer"]);
        const auto model = Model::load(dir);
        c.check(model->hp.aligner.classes == man["classes"].get<int>(), layout + ": classes from the config");
        for (const auto& k : man["cases"]) {
            const int before = c.failures;
            const std::string name = k["name"];
            const std::vector<float> audio = load_audio_file(a["--repo"] + "/" + k["audio"].get<std::string>());
            AlignOptions opts;
            opts.min_samples = man.value("min_samples", 8000);
            // the input the reference saw
            Session s(model);
            const Tensor rows = s.encode(s.mel(audio, opts.min_samples));
            const AlignInput in = build_align_input(*model, rows.rows(), split_alignment_words(k["text"].get<std::string>()));
            c.check(in.words == k["words"].get<std::vector<std::string>>(), name + ": word list");
            c.check(in.prompt.ids == k["ids"].get<std::vector<int>>(), name + ": input ids");
            c.check(in.positions == k["positions"].get<std::vector<int64_t>>(), name + ": timestamp positions");
            if (in.prompt.ids != k["ids"].get<std::vector<int>>()) continue;
            // the classifier's top classes at the timestamps
            const Tensor logits = s.prefill(in.prompt, rows, true);
            const TensorStore dump = TensorStore::open_file(dumps + "/" + k["file"].get<std::string>());
            const TensorRef* tv = dump.find("ts_topk");
            const TensorRef* ti = dump.find("ts_topk_ids");
            if (!tv || !ti) {
                c.check(false, name + ": dump has no ts_topk / ts_topk_ids");
                continue;
            }
            std::vector<float> vals(tv->numel());
            to_f32(*tv, vals.data());
            const std::vector<int64_t> ids = read_i64(*ti);
            const size_t K = size_t(tv->shape[1]);
            double worst = 0;
            int id_mismatch = 0;
            for (size_t p = 0; p < in.positions.size(); ++p) {
                const float* row = logits.row(in.positions[p]);
                for (size_t j = 0; j < K; ++j) {
                    worst = std::max(worst, double(std::fabs(row[ids[p * K + j]] - vals[p * K + j])));
                    // the j-th class must be the reference's where its value is clearly apart from its neighbours
                    const bool apart = (j == 0 || vals[p * K + j - 1] - vals[p * K + j] > 1e-4f) &&
                                       (j + 1 == K || vals[p * K + j] - vals[p * K + j + 1] > 1e-4f);
                    if (apart && j == 0 &&
                        int64_t(std::max_element(row, row + logits.cols()) - row) != ids[p * K])
                        ++id_mismatch;
                }
            }
            c.check(worst <= 1e-3, name + ": top-8 logits within 1e-3 (worst " + std::to_string(worst) + ")");
            c.check(id_mismatch == 0, name + ": argmax class at " + std::to_string(id_mismatch) + " positions differs");
            // the whole alignment
            const Alignment al = align_audio(model, audio, k["text"], opts);
            c.check(al.classes == k["classes"].get<std::vector<int>>(), name + ": classes");
            bool times = al.words.size() == k["items"].size();
            for (size_t w = 0; times && w < al.words.size(); ++w) {
                const auto& it = k["items"][w];
                times = al.words[w].text == it["text"].get<std::string>() &&
                        al.words[w].start == it["start_time"].get<double>() && al.words[w].end == it["end_time"].get<double>();
            }
            c.check(times, name + ": words and times equal the reference's decode_forced_alignment");
            std::printf("%s %-34s %-8s %zu words, %zu timestamps, worst logit diff %.2e\n",
                        c.failures > before ? "FAIL" : "ok  ", name.c_str(), layout.c_str(), al.words.size(),
                        in.positions.size(), worst);
        }
    }
    std::printf("%d passed, %d failed\n", c.checks - c.failures, c.failures);
    return c.failures ? 1 : 0;
}
