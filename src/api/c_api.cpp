// The C API: wraps Transcriber; catches every exception at the boundary and maps it to a status code.
#include "qasr/qasr.h"

#include "core/error.hpp"
#include "qasr/qasr.hpp"

#include <new>
#include <string>

struct qasr_model {
    qasr::Transcriber t;
};
struct qasr_result {
    qasr::TranscriptionResult r;
};

namespace {

thread_local std::string g_last_error;

qasr_status fail_with(qasr_status s, const char* msg) {
    g_last_error = msg;
    return s;
}

template <typename F> qasr_status guarded(qasr_status category, F&& f) {
    try {
        g_last_error.clear();
        f();
        return QASR_OK;
    } catch (const qasr::OutOfMemory& e) {
        return fail_with(QASR_ERR_OUT_OF_MEMORY, e.what());
    } catch (const std::bad_alloc&) {
        return fail_with(QASR_ERR_OUT_OF_MEMORY, "out of memory");
    } catch (const qasr::Error& e) {
        const std::string m = e.what();
        if (m.rfind("[options]", 0) == 0) return fail_with(QASR_ERR_INVALID_ARGUMENT, e.what());
        if (m.rfind("[audio]", 0) == 0) return fail_with(QASR_ERR_AUDIO, e.what());
        return fail_with(category, e.what());
    } catch (const std::exception& e) {
        return fail_with(QASR_ERR_INTERNAL, e.what());
    } catch (...) {
        return fail_with(QASR_ERR_INTERNAL, "unknown error");
    }
}

qasr::TranscribeOptions to_options(const qasr_transcribe_params* p) {
    qasr_transcribe_params d = p ? *p : qasr_default_transcribe_params();
    qasr::TranscribeOptions o;
    if (d.language) o.language = d.language;
    if (d.context) o.context = d.context;
    o.decode.max_new_tokens = d.max_new_tokens;
    o.decode.ignore_eos = d.ignore_eos != 0;
    o.decode.temperature = d.temperature;
    o.decode.top_p = d.top_p;
    o.decode.seed = d.seed;
    o.itn = d.itn != 0;
    return o;
}

} // namespace

extern "C" {

qasr_load_params qasr_default_load_params(void) { return {0, 1}; }

qasr_transcribe_params qasr_default_transcribe_params(void) { return {nullptr, nullptr, 0, 0, 0.0f, 1.0f, 0, 1}; }

qasr_status qasr_model_load(const char* dir, const qasr_load_params* params, qasr_model** out) {
    if (!dir || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model_dir and out must not be NULL");
    *out = nullptr;
    const qasr_load_params p = params ? *params : qasr_default_load_params();
    return guarded(QASR_ERR_MODEL, [&] {
        qasr::LoadOptions o;
        o.threads = p.n_threads;
        auto t = p.warmup ? qasr::Transcriber::load_with_warmup(dir, o) : qasr::Transcriber::load(dir, o);
        *out = new qasr_model{std::move(t)};
    });
}

void qasr_model_free(qasr_model* m) { delete m; }

qasr_status qasr_transcribe_file(const qasr_model* m, const char* path, const qasr_transcribe_params* params,
                                 qasr_result** out) {
    if (!m || !path || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model, path and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] { *out = new qasr_result{m->t.transcribe_file(path, to_options(params))}; });
}

qasr_status qasr_transcribe_pcm(const qasr_model* m, const float* samples, size_t n, const qasr_transcribe_params* params,
                                qasr_result** out) {
    if (!m || !out || (!samples && n)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model, samples and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] {
        std::vector<float> pcm(samples, samples + n);
        *out = new qasr_result{m->t.transcribe(pcm, to_options(params))};
    });
}

const char* qasr_result_text(const qasr_result* r) { return r ? r->r.text.c_str() : ""; }
const char* qasr_result_language(const qasr_result* r) { return r ? r->r.language.c_str() : ""; }
const char* qasr_result_raw_text(const qasr_result* r) { return r ? r->r.raw_text.c_str() : ""; }
double qasr_result_rtf(const qasr_result* r) { return r ? r->r.rtf : 0.0; }
double qasr_result_audio_seconds(const qasr_result* r) { return r ? r->r.audio_seconds : 0.0; }
size_t qasr_result_n_tokens(const qasr_result* r) { return r ? r->r.tokens.size() : 0; }
int qasr_result_token_id(const qasr_result* r, size_t i) { return r && i < r->r.tokens.size() ? r->r.tokens[i].id : -1; }
float qasr_result_token_logprob(const qasr_result* r, size_t i) {
    return r && i < r->r.tokens.size() ? r->r.tokens[i].logprob : 0.0f;
}
const char* qasr_result_finish_reason(const qasr_result* r) { return r ? qasr::finish_reason_name(r->r.finish) : ""; }
void qasr_result_free(qasr_result* r) { delete r; }

const char* qasr_last_error(void) { return g_last_error.c_str(); }

const char* qasr_status_string(qasr_status s) {
    switch (s) {
    case QASR_OK: return "ok";
    case QASR_ERR_INVALID_ARGUMENT: return "invalid argument";
    case QASR_ERR_MODEL: return "model error";
    case QASR_ERR_AUDIO: return "audio error";
    case QASR_ERR_OUT_OF_MEMORY: return "out of memory";
    case QASR_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

} // extern "C"
