// Model loading: config → tokenizer → weight table (checked as a whole) → cross-checks between them.
// Low-level failures are re-explained in terms of the model directory.
#include "model/model.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cstdio>
#include <future>
#include <utility>
#include <sys/stat.h>

namespace qasr {

void Model::check_positions(int64_t prompt, int64_t cap, const std::string& context, const char* what) const {
    const int64_t max = hp.text.max_positions;
    if (max <= 0 || prompt + cap <= max) return;
    fail("options", std::string(what) + " needs " + std::to_string(prompt + cap) + " positions (a prompt of " +
                        std::to_string(prompt) + " tokens, " + std::to_string(tokenizer.encode(context).size()) +
                        " of them the context's, and up to " + std::to_string(cap) +
                        " generated), more than the model's " + std::to_string(max) +
                        " (max_position_embeddings): shorten the context or the audio (segment_seconds), or lower "
                        "max_new_tokens");
}

const ops::HeadScreen* Model::head_screen() const {
    std::call_once(caches->head_once, [&] {
        const DecoderW& d = weights.dec;
        Stopwatch sw;
        caches->head = ops::head_screen(d.lm_head.empty() ? d.embed : d.lm_head);
        if (caches->head)
            log(LogLevel::Info, "LM head row norms for the screened greedy choice: " + std::to_string(sw.ms()) + " ms");
    });
    return caches->head.get();
}

std::shared_ptr<const Model> Model::load(const std::string& dir, const std::string& device,
                                         const std::string& compute) {
    if (compute != "auto" && compute != "bf16" && compute != "f32")
        fail("loader", "compute \"" + compute + "\": expected auto, bf16 or f32");
    Stopwatch sw;
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("loader", dir + ": not a model directory");
    // Three things at once: the accelerator's context is created (then the first request's front-end kernels are
    // loaded) and the tokenizer (~0.3 s for Qwen's 151k entries) is read on threads of their own, while this one
    // reads the weight table and uploads the weights.
    DeviceWarmer warm(device);
    auto tok = std::async(std::launch::async, [dir, &sw] {
        Tokenizer t = Tokenizer::load_dir(dir);
        return std::make_pair(std::move(t), sw.ms());
    });
    HParams hp = load_config(dir);
    auto m = std::make_shared<Model>(Model{dir, hp, {}, Tokenizer::empty(), {}, {}, MelFrontend(hp.audio.n_mels), 0, nullptr});
    double t_weights = 0, t_ctx = 0;
    try {
        TensorStore store = TensorStore::open_dir(dir);
        m->weights = load_weights(store, m->hp);
        if (compute != "auto") m->weights.enc.bf16_compute = m->weights.dec.bf16_compute = compute == "bf16";
        t_weights = sw.ms();
        warm.join();
        t_ctx = sw.ms();
        m->device = open_device(*m, device);
    } catch (...) {
        tok.get(); // a tokenizer error is reported first, as when the two were read one after the other
        throw;
    }
    const double t_device = sw.ms();
    auto [tokenizer, t_tok] = tok.get();
    m->tokenizer = std::move(tokenizer);
    m->special = SpecialIds::resolve(m->tokenizer);
    const SpecialIds& sp = m->special;
    if (m->hp.audio_token_id && *m->hp.audio_token_id != sp.audio_pad)
        fail("loader", "config audio_token_id " + std::to_string(*m->hp.audio_token_id) +
                           " differs from the tokenizer's <|audio_pad|> id " + std::to_string(sp.audio_pad));
    if (size_t(m->hp.text.vocab_size) < m->tokenizer.vocab_size())
        fail("loader", "text_config.vocab_size " + std::to_string(m->hp.text.vocab_size) +
                           " is smaller than the tokenizer (" + std::to_string(m->tokenizer.vocab_size()) + " ids)");
    if (const AlignerHParams& al = m->hp.aligner; al.classes) {
        const auto ts = m->tokenizer.token_id("<timestamp>");
        if (!ts || *ts != al.timestamp_token_id || al.timestamp_token_id >= m->hp.text.vocab_size)
            fail("loader", "the aligner's timestamp_token_id " + std::to_string(al.timestamp_token_id) +
                               (ts ? " differs from the tokenizer's <timestamp> id " + std::to_string(*ts) +
                                         " or lies outside the vocabulary"
                                   : " has no <timestamp> token in the tokenizer (not a Qwen3-ASR tokenizer?)"));
    }
    m->eos_ids = m->hp.eos_token_ids;
    if (m->eos_ids.empty()) m->eos_ids = {sp.endoftext, sp.im_end};
    for (int id : {sp.endoftext, sp.im_end})
        if (!m->is_eos(id)) m->eos_ids.push_back(id);
    warm.finish(); // the kernels the context thread loads beside the upload (normally done by now)
    m->load_ms = sw.ms();
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "load: weights %.0f ms, device context wait %.0f ms, device weights %.0f ms, tokenizer %.0f ms (its own "
                  "thread; waited %.0f ms), total %.0f ms",
                  t_weights, t_ctx - t_weights, t_device - t_ctx, t_tok, std::max(0.0, t_tok - t_device), m->load_ms);
    log(LogLevel::Info, msg);
    return m;
}

} // namespace qasr
