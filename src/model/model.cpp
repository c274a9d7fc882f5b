// Model loading: config → tokenizer → weight table (checked as a whole) → cross-checks between them.
// Low-level failures are re-explained in terms of the model directory.
#include "model/model.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/timer.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cstdio>
#include <sys/stat.h>

namespace qasr {

static Model make_model(const std::string& dir, HParams hp, Tokenizer tok) {
    SpecialIds sp = SpecialIds::resolve(tok);
    MelFrontend mel(hp.audio.n_mels);
    return Model{dir, std::move(hp), {}, std::move(tok), sp, {}, std::move(mel), 0, nullptr};
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

std::shared_ptr<const Model> Model::load(const std::string& dir, const std::string& device) {
    Stopwatch sw;
    DeviceWarmer warm(device); // the accelerator's context is created while the checkpoint is read
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) fail("loader", dir + ": not a model directory");
    HParams hp = load_config(dir);
    Tokenizer tok = Tokenizer::load_dir(dir);
    const double t_tok = sw.ms();
    auto m = std::make_shared<Model>(make_model(dir, hp, std::move(tok)));
    TensorStore store = TensorStore::open_dir(dir);
    m->weights = load_weights(store, m->hp);
    const double t_weights = sw.ms();
    const SpecialIds& sp = m->special;
    if (m->hp.audio_token_id && *m->hp.audio_token_id != sp.audio_pad)
        fail("loader", "config audio_token_id " + std::to_string(*m->hp.audio_token_id) +
                           " differs from the tokenizer's <|audio_pad|> id " + std::to_string(sp.audio_pad));
    if (size_t(m->hp.text.vocab_size) < m->tokenizer.vocab_size())
        fail("loader", "text_config.vocab_size " + std::to_string(m->hp.text.vocab_size) +
                           " is smaller than the tokenizer (" + std::to_string(m->tokenizer.vocab_size()) + " ids)");
    m->eos_ids = m->hp.eos_token_ids;
    if (m->eos_ids.empty()) m->eos_ids = {sp.endoftext, sp.im_end};
    for (int id : {sp.endoftext, sp.im_end})
        if (!m->is_eos(id)) m->eos_ids.push_back(id);
    warm.join();
    const double t_ctx = sw.ms();
    m->device = open_device(*m, device);
    m->load_ms = sw.ms();
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "load: config + tokenizer %.0f ms, weights %.0f ms, device context wait %.0f ms, device weights %.0f ms "
                  "(total %.0f ms)",
                  t_tok, t_weights - t_tok, t_ctx - t_weights, m->load_ms - t_ctx, m->load_ms);
    log(LogLevel::Info, msg);
    return m;
}

} // namespace qasr
