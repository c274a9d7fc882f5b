// Runs the qasr pipeline stage by stage with taps and compares each stage with the dump.
#include "parity_compare.hpp"

#include "audio/audio.hpp"
#include "io/safetensors.hpp"
#include "model/weights.hpp"
#include "pipeline/session.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

using namespace qasr;

namespace {

Tensor read_f32(const TensorRef& t) {
    Tensor out(t.shape);
    to_f32(t, out.ptr());
    return out;
}

std::vector<int64_t> read_i64(const TensorRef& t) {
    std::vector<int64_t> v(t.numel());
    std::memcpy(v.data(), t.data, v.size() * 8);
    return v;
}

struct Checker {
    ParityResult& r;
    double worst_rel = 0, worst_logit = 0;

    void check(bool ok, const std::string& what) {
        ++r.checks;
        if (!ok) {
            ++r.failures;
            r.details.push_back(what);
        }
    }
    // Compares the leading rows of `ours` with `ref` (compact dumps keep fewer conv chunks).
    void rel_l2(const std::string& name, const Tensor& ours, const Tensor& ref, double tol) {
        if (ref.size() > ours.size() || ref.size() == 0) {
            check(false, name + ": shape mismatch ours " + shape_str(ours.shape) + " ref " + shape_str(ref.shape));
            return;
        }
        double num = 0, den = 0;
        for (size_t i = 0; i < ref.size(); ++i) {
            const double d = double(ours.data[i]) - ref.data[i];
            num += d * d;
            den += double(ref.data[i]) * ref.data[i];
        }
        const double rel = std::sqrt(num / std::max(den, 1e-30));
        worst_rel = std::max(worst_rel, rel);
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s rel L2 %.3g > %.0e", name.c_str(), rel, tol);
        check(rel <= tol && std::isfinite(rel), buf);
    }
    void max_abs(const std::string& name, const Tensor& ours, const Tensor& ref, double tol) {
        if (ours.shape != ref.shape) {
            check(false, name + ": shape ours " + shape_str(ours.shape) + " ref " + shape_str(ref.shape));
            return;
        }
        double m = 0;
        for (size_t i = 0; i < ref.size(); ++i) m = std::max(m, std::fabs(double(ours.data[i]) - ref.data[i]));
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s max|d| %.3g > %.0e", name.c_str(), m, tol);
        check(m <= tol, buf);
    }
    // Logit rows: full [R, V] reference, or compact top-k (values + ids). Argmax must agree on every row.
    void logits(const std::string& name, const Tensor& ours, const TensorStore& dump, const std::string& full,
                const std::string& topk) {
        const int64_t V = ours.cols();
        int bad_argmax = 0;
        double m = 0;
        auto argmax = [&](const float* x) { return int64_t(std::max_element(x, x + V) - x); };
        if (const TensorRef* f = dump.find(full)) {
            const Tensor ref = read_f32(*f);
            if (ref.rows() != ours.rows() || ref.cols() != V) {
                check(false, name + ": shape ours " + shape_str(ours.shape) + " ref " + shape_str(ref.shape));
                return;
            }
            for (int64_t i = 0; i < ref.rows(); ++i) {
                for (int64_t v = 0; v < V; ++v) m = std::max(m, std::fabs(double(ours.row(i)[v]) - ref.row(i)[v]));
                bad_argmax += argmax(ours.row(i)) != argmax(ref.row(i));
            }
        } else if (const TensorRef* tv = dump.find(topk + "_topk")) {
            const Tensor vals = read_f32(*tv);
            const std::vector<int64_t> ids = read_i64(*dump.find(topk + "_topk_ids"));
            const int64_t K = vals.cols();
            if (vals.rows() != ours.rows()) {
                check(false, name + ": " + std::to_string(ours.rows()) + " rows vs ref " + std::to_string(vals.rows()));
                return;
            }
            for (int64_t i = 0; i < vals.rows(); ++i) {
                for (int64_t k = 0; k < K; ++k)
                    m = std::max(m, std::fabs(double(ours.row(i)[ids[size_t(i * K + k)]]) - vals.row(i)[k]));
                bad_argmax += argmax(ours.row(i)) != ids[size_t(i * K)];
            }
        } else {
            check(false, name + ": not in the dump");
            return;
        }
        worst_logit = std::max(worst_logit, m);
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s max|d| %.3g > 5e-3", name.c_str(), m);
        check(m <= 5e-3, buf);
        check(bad_argmax == 0, name + ": argmax differs at " + std::to_string(bad_argmax) + " rows");
    }
};

} // namespace

ParityResult compare_case(const std::shared_ptr<const Model>& model, const nlohmann::json& c,
                          const std::string& dumps_dir, const std::string& repo_root, int greedy_max) {
    ParityResult res;
    Checker ck{res};
    const TensorStore dump = TensorStore::open_file(dumps_dir + "/" + c["file"].get<std::string>());
    std::map<std::string, Tensor> taps;
    const TapFn tap = [&](const std::string& n, const Tensor& t) { taps[n] = t; };
    auto compare_taps = [&] { // every captured tap against the dump, then forget them
        for (const auto& [name, t] : taps) {
            const TensorRef* ref = dump.find(name);
            if (!ref) ck.check(false, name + ": not in the dump");
            else ck.rel_l2(name, t, read_f32(*ref), 1e-4);
        }
        taps.clear();
    };
    Session s(model);

    std::vector<float> audio = load_audio_file(repo_root + "/" + c["audio"].get<std::string>());
    TranscribeOptions o;
    o.min_samples = c.value("min_samples", 8000);
    if (c["language"].is_string()) o.language = c["language"].get<std::string>();
    o.context = c.value("context", "");
    o.itn = false;

    ck.max_abs("mel_filters", model->mel.filterbank_matrix(), read_f32(*dump.find("mel_filters")), 1e-7);
    const Tensor mel = s.mel(audio, o.min_samples);
    ck.max_abs("mel", mel, read_f32(*dump.find("mel")), 1e-4);
    // Feed the reference mel to the encoder so encoder taps measure the encoder alone.
    const Tensor rows = s.encode(read_f32(*dump.find("mel")), &tap);
    compare_taps();
    const Prompt p = s.prompt(rows.rows(), o);
    std::vector<int> want_ids = c["prompt_ids"].get<std::vector<int>>();
    ck.check(p.ids == want_ids, "prompt ids differ");
    const Tensor logits = s.prefill(p, read_f32(*dump.find("proj_out")), true, &tap);
    compare_taps();
    ck.logits("logits", logits, dump, "logits", "logits");

    // Forced greedy: plain argmax, no stop rule, from our encoder's output (of the reference mel).
    const std::vector<int> forced_ref = c["greedy_forced_ids"].get<std::vector<int>>();
    Tensor last = s.prefill(p, rows);
    Tensor steps({int64_t(forced_ref.size()), last.cols()});
    std::vector<int> forced;
    for (size_t n = 0; n < forced_ref.size(); ++n) {
        std::memcpy(steps.row(int64_t(n)), last.ptr(), size_t(last.cols()) * sizeof(float));
        const int tok = int(std::max_element(last.ptr(), last.ptr() + last.cols()) - last.ptr());
        forced.push_back(tok);
        if (n + 1 < forced_ref.size()) last = s.step(tok);
    }
    ck.logits("step_logits", steps, dump, "step_logits", "step");
    ck.check(forced == forced_ref, "forced greedy ids differ (" + std::to_string(forced.size()) + " steps)");

    // EOS-stopped greedy with the reference's stopping rule (EOS or cap; no repetition guard).
    o.decode.repetition_limit = 0;
    std::vector<int> greedy_ref = c["greedy_ids"].get<std::vector<int>>();
    const bool truncated = greedy_max > 0 && int(greedy_ref.size()) > greedy_max;
    o.decode.max_new_tokens = truncated ? greedy_max : c.value("greedy_cap", 0);
    TranscriptionResult r = s.run(audio, o);
    std::vector<int> greedy;
    for (const auto& t : r.tokens)
        if (!model->is_eos(t.id)) greedy.push_back(t.id);
    if (truncated) greedy_ref.resize(size_t(greedy_max));
    ck.check(greedy == greedy_ref, "greedy ids differ");
    if (!truncated) {
        ck.check(r.raw_text == c["raw_text"].get<std::string>(), "raw text differs");
        if (c.contains("text") && c["text"].is_string())
            ck.check(r.text == c["text"].get<std::string>(), "parsed text differs");
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "L=%zu A=%lld worst tap rel L2 %.2e, worst logit |d| %.2e, %d/%d checks",
                  p.ids.size(), (long long)rows.rows(), ck.worst_rel, ck.worst_logit, res.checks - res.failures,
                  res.checks);
    res.summary = buf;
    return res;
}
