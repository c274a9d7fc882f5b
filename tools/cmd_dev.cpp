// `qasr dev make-random`: writes deterministic random-weight checkpoints (tiny / 0.6b / 1.7b, hf or original
// layout) for parity tests and benchmarks; see docs/reference-dumps.md.
#include "args.hpp"
#include "commands.hpp"

#include "audio/audio.hpp"
#include "core/dtype.hpp"
#include "model/random_checkpoint.hpp"
#include "pipeline/session.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <vector>

namespace qasr::cli {

namespace {

// Argmax and top-2 margin of each row.
void argmax_rows(const Tensor& l, nlohmann::json& ids, nlohmann::json& margins) {
    for (int64_t r = 0; r < l.rows(); ++r) {
        const float* x = l.row(r);
        int64_t best = 0, second = -1;
        for (int64_t i = 1; i < l.cols(); ++i)
            if (x[i] > x[best]) second = best, best = i;
            else if (second < 0 || x[i] > x[second]) second = i;
        ids.push_back(best);
        margins.push_back(second < 0 ? 0.0 : double(x[best]) - double(x[second]));
    }
}

// The same rows as a bf16 model emits them (each logit rounded to bf16, nearest even): the argmax with the lowest
// index among equal values (torch's rule) and the row's `k` largest float32 logits as [id, value] pairs — what
// scripts/cuda_reference.py needs to tell a tie of the bf16 reference's logits from a real disagreement.
void bf16_argmax_rows(const Tensor& l, int k, nlohmann::json& ids, nlohmann::json& tops) {
    std::vector<int64_t> order(size_t(l.cols()));
    for (int64_t r = 0; r < l.rows(); ++r) {
        const float* x = l.row(r);
        int64_t best = 0;
        float bv = bf16_to_f32(f32_to_bf16(x[0]));
        for (int64_t i = 1; i < l.cols(); ++i)
            if (const float v = bf16_to_f32(f32_to_bf16(x[i])); v > bv) bv = v, best = i;
        ids.push_back(best);
        for (int64_t i = 0; i < l.cols(); ++i) order[size_t(i)] = i;
        const int kk = int(std::min<int64_t>(k, l.cols()));
        std::partial_sort(order.begin(), order.begin() + kk, order.end(),
                          [x](int64_t a, int64_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
        nlohmann::json t = nlohmann::json::array();
        for (int j = 0; j < kk; ++j) t.push_back({order[size_t(j)], x[order[size_t(j)]]});
        tops.push_back(t);
    }
}

// `qasr dev logits`: the prefill argmax at every prompt position and N forced greedy steps (plain argmax, no
// stop rule) with their top-2 margins, as JSON — what scripts/cuda_reference.py compares with transformers.
int dev_logits(int argc, char** argv) {
    Args a(argc, argv, 3);
    std::string model, device = "cpu", audio, v;
    int steps = 64;
    while (!a.done()) {
        if (a.option("-m", model) || a.option("--model", model) || a.option("--device", device)) {
        } else if (a.option("--steps", v)) {
            steps = int(to_long("--steps", v, 1, 4096));
        } else if (a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek());
        } else {
            audio = a.next();
        }
    }
    if (model.empty() || audio.empty()) throw std::invalid_argument("usage: qasr dev logits -m DIR [--device D] [--steps N] AUDIO");
    Session s(Model::load(model, device));
    TranscribeOptions o;
    const Tensor rows = s.encode(s.mel(load_audio_file(audio), o.min_samples));
    const Prompt p = s.prompt(rows.rows(), o);
    nlohmann::json j = {{"prompt_ids", p.ids}, {"device", device}};
    nlohmann::json pid = nlohmann::json::array(), pm = nlohmann::json::array();
    Tensor all = s.prefill(p, rows, true);
    argmax_rows(all, pid, pm);
    j["prefill_argmax"] = pid;
    j["prefill_margin"] = pm;
    nlohmann::json pb = nlohmann::json::array(), pt = nlohmann::json::array();
    bf16_argmax_rows(all, 4, pb, pt);
    j["prefill_argmax_bf16"] = pb;
    j["prefill_top"] = pt;
    nlohmann::json gid = nlohmann::json::array(), gm = nlohmann::json::array();
    Tensor last({1, all.cols()});
    std::copy(all.row(all.rows() - 1), all.row(all.rows() - 1) + all.cols(), last.ptr());
    for (int n = 0; n < steps; ++n) {
        argmax_rows(last, gid, gm);
        if (n + 1 < steps) last = s.step(gid.back().get<int>());
    }
    j["forced_ids"] = gid;
    j["forced_margin"] = gm;
    std::printf("%s\n", json_text(j).c_str());
    return 0;
}

} // namespace

int cmd_dev(int argc, char** argv) {
    const char* help = "usage: qasr dev make-random --preset tiny|0.6b|1.7b|aligner-tiny|aligner-0.6b [--layout hf|original] [--seed N]\n"
                       "                            [--tokenizer DIR] OUT_DIR\n"
                       "       qasr dev logits -m DIR [--device D] [--steps N] AUDIO   (prefill argmax + forced greedy, JSON)\n";
    if (argc < 3 || std::string(argv[2]) == "-h" || std::string(argv[2]) == "--help") {
        std::fputs(help, stdout);
        return argc < 3 ? 2 : 0;
    }
    if (std::string(argv[2]) == "logits") return dev_logits(argc, argv);
    if (std::string(argv[2]) != "make-random") throw std::invalid_argument("unknown dev command " + std::string(argv[2]));
    Args a(argc, argv, 3);
    std::string preset, layout = "hf", tok, out, v;
    uint64_t seed = 1;
    while (!a.done()) {
        if (a.option("--preset", preset) || a.option("--layout", layout) || a.option("--tokenizer", tok)) {
        } else if (a.option("--seed", v)) {
            seed = uint64_t(to_long("--seed", v, 0, 1L << 40));
        } else if (a.peek()[0] == '-') {
            throw std::invalid_argument("unknown option " + a.peek());
        } else {
            out = a.next();
        }
    }
    if (preset.empty() || out.empty()) throw std::invalid_argument(help);
    write_random_checkpoint(out, preset, layout, seed, tok);
    return 0;
}

} // namespace qasr::cli
