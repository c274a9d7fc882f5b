// The C API: wraps Transcriber; catches every exception at the boundary and maps it to a status code.
#include "qasr/qasr.h"

#include "core/error.hpp"
#include "audio/audio.hpp"
#include "qasr/qasr.hpp"

#include <deque>
#include <memory>
#include <new>
#include <string>

struct qasr_model {
    qasr::Transcriber t;
};
struct qasr_result {
    qasr::TranscriptionResult r;
    std::string subtitles; // qasr_result_subtitles' last answer
};
struct qasr_stream {
    qasr_stream_callback cb = nullptr;
    void* user = nullptr;
    std::deque<qasr::StreamEvent> queue;
    qasr::StreamEvent current; // backs the strings of the last event handed out
    std::unique_ptr<qasr::Stream> s;
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
    } catch (const qasr::Cancelled& e) {
        return fail_with(QASR_ERR_CANCELLED, e.what());
    } catch (const std::bad_alloc&) {
        return fail_with(QASR_ERR_OUT_OF_MEMORY, "out of memory");
    } catch (const qasr::Error& e) {
        const std::string m = e.what();
        if (m.rfind("[options]", 0) == 0) return fail_with(QASR_ERR_INVALID_ARGUMENT, e.what());
        if (m.rfind("[audio]", 0) == 0) return fail_with(QASR_ERR_AUDIO, e.what());
        if (m.rfind("[stream]", 0) == 0) return fail_with(QASR_ERR_INVALID_ARGUMENT, e.what());
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
    o.decode.beam_size = d.beam_size;
    o.decode.length_penalty = d.length_penalty;
    o.itn = d.itn != 0;
    o.segment_seconds = d.segment_seconds;
    o.language_only = d.language_only != 0;
    o.offset_seconds = d.offset_seconds;
    o.duration_seconds = d.duration_seconds;
    if (d.aligner) o.max_piece_seconds = qasr::Aligner::max_piece_seconds;
    if (d.on_segment) {
        const auto cb = d.on_segment;
        void* user = d.user_data;
        o.on_segment = [cb, user](const qasr::Segment& s) { cb(s.text.c_str(), s.start, s.end, user); };
    }
    if (d.on_text) {
        const auto cb = d.on_text;
        void* user = d.user_data;
        o.on_text = [cb, user](const std::string& delta) { cb(delta.c_str(), user); };
    }
    if (d.on_text_tokens) {
        const auto cb = d.on_text_tokens;
        void* user = d.user_data;
        o.on_text_tokens = [cb, user](const std::string& delta, const std::vector<qasr::TokenInfo>& tokens) {
            std::vector<int> ids(tokens.size());
            std::vector<float> lps(tokens.size());
            for (size_t i = 0; i < tokens.size(); ++i) ids[i] = tokens[i].id, lps[i] = tokens[i].logprob;
            cb(delta.c_str(), ids.data(), lps.data(), tokens.size(), user);
        };
    }
    if (d.on_progress) {
        const auto cb = d.on_progress;
        void* user = d.user_data;
        o.on_progress = [cb, user](float f) { cb(f, user); };
    }
    if (d.abort_callback) {
        const auto cb = d.abort_callback;
        void* user = d.abort_user_data;
        o.abort = [cb, user] { return cb(user) != 0; };
    }
    return o;
}

} // namespace

struct qasr_aligner {
    qasr::Aligner a;
};

namespace {

// A transcription, with word timestamps when the params name an aligner.
qasr_result* transcribe_samples(const qasr_model* m, const std::vector<float>& samples, const qasr_transcribe_params* p) {
    auto r = std::make_unique<qasr_result>(qasr_result{m->t.transcribe(samples, to_options(p)), {}});
    if (p && p->aligner) p->aligner->a.add_words(samples, r->r);
    return r.release();
}

} // namespace

extern "C" {

qasr_load_params qasr_default_load_params(void) { return {0, 1, nullptr, 1, nullptr}; }

qasr_transcribe_params qasr_default_transcribe_params(void) {
    return {nullptr, nullptr, 0, 0, 0.0f, 1.0f, 0, 1, 0.0, nullptr, nullptr, 0, nullptr, 1, 1.0f, nullptr, nullptr, nullptr, nullptr, 0.0, 0.0, nullptr};
}

qasr_status qasr_model_load(const char* dir, const qasr_load_params* params, qasr_model** out) {
    if (!dir || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model_dir and out must not be NULL");
    *out = nullptr;
    const qasr_load_params p = params ? *params : qasr_default_load_params();
    return guarded(QASR_ERR_MODEL, [&] {
        qasr::LoadOptions o;
        o.threads = p.n_threads;
        o.max_batch = p.max_batch;
        if (p.device) o.device = p.device;
        if (p.compute) o.compute = p.compute;
        auto t = p.warmup ? qasr::Transcriber::load_with_warmup(dir, o) : qasr::Transcriber::load(dir, o);
        *out = new qasr_model{std::move(t)};
    });
}

void qasr_model_free(qasr_model* m) { delete m; }

qasr_status qasr_transcribe_file(const qasr_model* m, const char* path, const qasr_transcribe_params* params,
                                 qasr_result** out) {
    if (!m || !path || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model, path and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] { *out = transcribe_samples(m, qasr::load_audio_file(path), params); });
}

qasr_status qasr_transcribe_memory(const qasr_model* m, const void* data, size_t size, const qasr_transcribe_params* params,
                                   qasr_result** out) {
    if (!m || !out || (!data && size)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model, data and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] {
        *out = transcribe_samples(m, qasr::load_audio_bytes(static_cast<const uint8_t*>(data), size, "audio in memory"),
                                  params);
    });
}

qasr_status qasr_transcribe_pcm(const qasr_model* m, const float* samples, size_t n, const qasr_transcribe_params* params,
                                qasr_result** out) {
    if (!m || !out || (!samples && n)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model, samples and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] {
        *out = transcribe_samples(m, std::vector<float>(samples, samples + n), params);
    });
}

const char* qasr_result_text(const qasr_result* r) { return r ? r->r.text.c_str() : ""; }
const char* qasr_result_language(const qasr_result* r) { return r ? r->r.language.c_str() : ""; }
double qasr_result_language_probability(const qasr_result* r) { return r ? r->r.language_probability : 0.0; }
const char* qasr_result_raw_text(const qasr_result* r) { return r ? r->r.raw_text.c_str() : ""; }
double qasr_result_rtf(const qasr_result* r) { return r ? r->r.rtf : 0.0; }
double qasr_result_audio_seconds(const qasr_result* r) { return r ? r->r.audio_seconds : 0.0; }
size_t qasr_result_n_tokens(const qasr_result* r) { return r ? r->r.tokens.size() : 0; }
int qasr_result_token_id(const qasr_result* r, size_t i) { return r && i < r->r.tokens.size() ? r->r.tokens[i].id : -1; }
float qasr_result_token_logprob(const qasr_result* r, size_t i) {
    return r && i < r->r.tokens.size() ? r->r.tokens[i].logprob : 0.0f;
}
const char* qasr_result_finish_reason(const qasr_result* r) { return r ? qasr::finish_reason_name(r->r.finish) : ""; }
size_t qasr_result_n_segments(const qasr_result* r) { return r ? r->r.segments.size() : 0; }
double qasr_result_segment_start(const qasr_result* r, size_t i) {
    return r && i < r->r.segments.size() ? r->r.segments[i].start : 0.0;
}
double qasr_result_segment_end(const qasr_result* r, size_t i) {
    return r && i < r->r.segments.size() ? r->r.segments[i].end : 0.0;
}
const char* qasr_result_segment_text(const qasr_result* r, size_t i) {
    return r && i < r->r.segments.size() ? r->r.segments[i].text.c_str() : "";
}
size_t qasr_result_segment_first_token(const qasr_result* r, size_t i) {
    return r && i < r->r.segments.size() ? r->r.segments[i].first_token : 0;
}
size_t qasr_result_segment_n_tokens(const qasr_result* r, size_t i) {
    return r && i < r->r.segments.size() ? r->r.segments[i].n_tokens : 0;
}
const char* qasr_result_subtitles(qasr_result* r, const char* format) {
    if (!r || !format) return nullptr;
    const std::string f = format;
    if (f != "srt" && f != "vtt") return nullptr;
    try {
        r->subtitles = f == "srt" ? qasr::to_srt(r->r.segments) : qasr::to_vtt(r->r.segments);
    } catch (...) { // out of memory
        return nullptr;
    }
    return r->subtitles.c_str();
}
size_t qasr_result_n_words(const qasr_result* r) { return r ? r->r.words.size() : 0; }
double qasr_result_word_start(const qasr_result* r, size_t i) { return r && i < r->r.words.size() ? r->r.words[i].start : 0.0; }
double qasr_result_word_end(const qasr_result* r, size_t i) { return r && i < r->r.words.size() ? r->r.words[i].end : 0.0; }
const char* qasr_result_word_text(const qasr_result* r, size_t i) {
    return r && i < r->r.words.size() ? r->r.words[i].text.c_str() : "";
}
void qasr_result_free(qasr_result* r) { delete r; }

qasr_status qasr_aligner_load(const char* dir, const qasr_load_params* params, qasr_aligner** out) {
    if (!dir || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model_dir and out must not be NULL");
    *out = nullptr;
    const qasr_load_params p = params ? *params : qasr_default_load_params();
    return guarded(QASR_ERR_MODEL, [&] {
        qasr::LoadOptions o;
        o.threads = p.n_threads;
        if (p.device) o.device = p.device;
        if (p.compute) o.compute = p.compute;
        *out = new qasr_aligner{qasr::Aligner::load(dir, o)};
    });
}

void qasr_aligner_free(qasr_aligner* a) { delete a; }

namespace {

qasr_result* alignment_result(const qasr::Alignment& al, const char* text) {
    auto* r = new qasr_result{};
    r->r.text = text;
    r->r.words = al.words;
    r->r.audio_seconds = al.audio_seconds;
    r->r.rtf = al.rtf;
    r->r.timings = al.timings;
    return r;
}

} // namespace

qasr_status qasr_align_pcm(const qasr_aligner* a, const float* samples, size_t n, const char* text, qasr_result** out) {
    if (!a || !out || !text || (!samples && n))
        return fail_with(QASR_ERR_INVALID_ARGUMENT, "aligner, samples, text and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] {
        const std::vector<float> pcm(samples, samples + n);
        *out = alignment_result(a->a.align(pcm, text), text);
    });
}

qasr_status qasr_align_file(const qasr_aligner* a, const char* path, const char* text, qasr_result** out) {
    if (!a || !out || !text || !path) return fail_with(QASR_ERR_INVALID_ARGUMENT, "aligner, path, text and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] { *out = alignment_result(a->a.align_file(path, text), text); });
}

qasr_status qasr_result_add_words(const qasr_aligner* a, const float* samples, size_t n, qasr_result* r) {
    if (!a || !r || (!samples && n)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "aligner, samples and r must not be NULL");
    return guarded(QASR_ERR_INTERNAL, [&] {
        const std::vector<float> pcm(samples, samples + n);
        a->a.add_words(pcm, r->r);
    });
}

qasr_stream_params qasr_default_stream_params(void) { return {nullptr, nullptr, 2.0f, 5, 2, 3, 0, 1, 1, 0.0f, 0, 0}; }

qasr_status qasr_stream_open(const qasr_model* m, const qasr_stream_params* params, qasr_stream_callback cb, void* user,
                             qasr_stream** out) {
    if (!m || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "model and out must not be NULL");
    *out = nullptr;
    const qasr_stream_params p = params ? *params : qasr_default_stream_params();
    return guarded(QASR_ERR_INTERNAL, [&] {
        qasr::StreamOptions o;
        if (p.language) o.language = p.language;
        if (p.context) o.context = p.context;
        o.chunk_seconds = p.chunk_seconds;
        o.rollback_tokens = p.rollback_tokens;
        o.unfixed_chunks = p.unfixed_chunks;
        o.max_segment_windows = p.max_segment_windows;
        o.exact_final = p.exact_final != 0;
        o.itn = p.itn != 0;
        o.speculative = p.speculative != 0;
        o.pause_seconds = p.pause_seconds;
        o.endpoint_final = p.endpoint_final != 0;
        o.logprobs = p.logprobs != 0;
        auto st = std::make_unique<qasr_stream>();
        qasr_stream* raw = st.get();
        st->cb = cb;
        st->user = user;
        st->s = std::make_unique<qasr::Stream>(m->t.open_stream(o, [raw](const qasr::StreamEvent& e) {
            if (raw->cb) {
                const qasr_stream_event ce{e.kind == qasr::StreamEvent::Kind::Final, e.stable.c_str(), e.unstable.c_str(),
                                           e.language.c_str(), e.audio_seconds};
                raw->cb(raw->user, &ce);
            } else {
                raw->queue.push_back(e);
            }
        }));
        *out = st.release();
    });
}

qasr_status qasr_stream_push(qasr_stream* s, const float* samples, size_t n) {
    if (!s || (!samples && n)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "stream and samples must not be NULL");
    return guarded(QASR_ERR_INTERNAL, [&] { s->s->push(samples, n); });
}

qasr_status qasr_stream_push_s16le(qasr_stream* s, const uint8_t* bytes, size_t n) {
    if (!s || (!bytes && n)) return fail_with(QASR_ERR_INVALID_ARGUMENT, "stream and bytes must not be NULL");
    return guarded(QASR_ERR_INTERNAL, [&] { s->s->push_s16le(bytes, n); });
}

void qasr_stream_interrupt(qasr_stream* s) {
    if (s) s->s->interrupt();
}

double qasr_stream_trailing_quiet_seconds(const qasr_stream* s) { return s ? s->s->trailing_quiet_seconds() : 0.0; }

int qasr_stream_next_event(qasr_stream* s, qasr_stream_event* ev) {
    if (!s || !ev || s->queue.empty()) return 0;
    s->current = std::move(s->queue.front());
    s->queue.pop_front();
    *ev = {s->current.kind == qasr::StreamEvent::Kind::Final, s->current.stable.c_str(), s->current.unstable.c_str(),
           s->current.language.c_str(), s->current.audio_seconds};
    return 1;
}

qasr_status qasr_stream_finish(qasr_stream* s, qasr_result** out) {
    if (!s || !out) return fail_with(QASR_ERR_INVALID_ARGUMENT, "stream and out must not be NULL");
    *out = nullptr;
    return guarded(QASR_ERR_INTERNAL, [&] { *out = new qasr_result{s->s->finish(), {}}; });
}

void qasr_stream_free(qasr_stream* s) { delete s; }

const char* qasr_last_error(void) { return g_last_error.c_str(); }

const char* qasr_version(void) { return QASR_VERSION_STRING; }

const char* qasr_system_info(void) {
    static const std::string info = [] {
        try {
            return qasr::system_info();
        } catch (...) {
            return std::string("qasr " QASR_VERSION_STRING);
        }
    }();
    return info.c_str();
}

const char* qasr_status_string(qasr_status s) {
    switch (s) {
    case QASR_OK: return "ok";
    case QASR_ERR_INVALID_ARGUMENT: return "invalid argument";
    case QASR_ERR_MODEL: return "model error";
    case QASR_ERR_AUDIO: return "audio error";
    case QASR_ERR_OUT_OF_MEMORY: return "out of memory";
    case QASR_ERR_INTERNAL: return "internal error";
    case QASR_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

} // extern "C"
