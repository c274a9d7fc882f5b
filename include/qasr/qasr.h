/* qasr — Qwen3-ASR speech recognition. Stable C API (opaque handles, status codes), usable from any FFI.
 *
 *   qasr_model* m = NULL;
 *   if (qasr_model_load("models/demo", NULL, &m) != QASR_OK) { fprintf(stderr, "%s\n", qasr_last_error()); }
 *   qasr_result* r = NULL;
 *   qasr_transcribe_file(m, "samples/demo_en.wav", NULL, &r);
 *   printf("%s\n", qasr_result_text(r));
 *   qasr_result_free(r); qasr_model_free(m);
 *
 * Functions never abort: failures return a status and set a thread-local message (qasr_last_error()).
 * A model may be used from several threads at once. Strings returned are owned by their handle.
 * The params structs gain fields at their end as the API grows: start from qasr_default_*_params() and build against
 * the header of the library you link (0.x versions make no promise of binary compatibility between releases). */
#ifndef QASR_H
#define QASR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    QASR_OK = 0,
    QASR_ERR_INVALID_ARGUMENT = 1, /* NULL handle, bad option value */
    QASR_ERR_MODEL = 2,            /* model directory, config, tokenizer or weights unusable */
    QASR_ERR_AUDIO = 3,            /* audio missing, unreadable or malformed */
    QASR_ERR_OUT_OF_MEMORY = 4,
    QASR_ERR_INTERNAL = 5,
    QASR_ERR_CANCELLED = 6         /* the params' abort_callback stopped the transcription */
} qasr_status;

typedef struct qasr_model qasr_model;
typedef struct qasr_result qasr_result;
typedef struct qasr_aligner qasr_aligner; /* a forced aligner (word timestamps): qasr_aligner_load below */

typedef struct {
    int n_threads; /* 0: all cores */
    int warmup;    /* non-zero: run a warm-up transcription after loading */
    const char* device; /* NULL or "cpu"; "cuda" / "cuda:N" with the CUDA backend */
    int max_batch;      /* > 1 lets concurrent transcriptions decode together, up to this many (1: each alone) */
    const char* compute; /* NULL or "auto"; "bf16" or "f32": the CPU's matrix-matrix products (LoadOptions::compute) */
} qasr_load_params;

typedef struct {
    const char* language;  /* NULL or "": detect */
    const char* context;   /* NULL or "": none */
    int max_new_tokens;    /* 0: automatic cap */
    int ignore_eos;        /* non-zero: exactly max_new_tokens argmax tokens */
    float temperature;     /* 0: greedy */
    float top_p;
    uint64_t seed;
    int itn;               /* non-zero: inverse text normalization of the final text */
    double segment_seconds; /* > 0: cut at pauses into pieces of at most this many seconds (2..1200), each
                               transcribed alone, for segment times (TranscribeOptions::segment_seconds); 0: whole */
    /* NULL or called on the calling thread with each segment as soon as its piece is transcribed */
    void (*on_segment)(const char* text, double start_seconds, double end_seconds, void* user_data);
    void* user_data;
    int language_only;     /* non-zero: identify the language only (decoding stops after the language tag; empty
                              text; qasr_result_language_probability); needs language NULL or "" */
    const qasr_aligner* aligner; /* NULL, or word timestamps of the transcript from this aligner (qasr_result_word_*;
                                    pieces are then at most 180 s) */
    int beam_size;         /* 1: greedy; 2..16: beam search (DecodeOptions::beam_size; temperature must be 0) */
    float length_penalty;  /* beam search: scores are sum(log p) / length^length_penalty (default 1) */
    /* NULL, or asked before each stage, between the layers of a CPU pass and before every decode step; once it
       returns non-zero the transcription stops and returns QASR_ERR_CANCELLED (TranscribeOptions::abort). It may be
       called from another thread (a model loaded with max_batch > 1) and often: keep it cheap and thread-safe. */
    int (*abort_callback)(void* abort_user_data);
    void* abort_user_data;
    /* NULL, or called with each delta of the transcript's text as the model writes it (UTF-8; the deltas
       concatenate to the text before the repetition fix and inverse text normalization: TranscribeOptions::on_text),
       with user_data; possibly from another thread (max_batch > 1) */
    void (*on_text)(const char* delta, void* user_data);
    /* NULL, or called with the transcription's progress, a fraction in [0, 1] for a progress bar (an estimate: 0
       first, non-decreasing, 1 exactly once when the transcript is complete: TranscribeOptions::on_progress), with
       user_data; possibly from another thread (max_batch > 1) */
    void (*on_progress)(float fraction, void* user_data);
    /* a part of the audio only: from offset_seconds, for duration_seconds (0: to the end); segment and word times
       stay those of the whole audio (TranscribeOptions::offset_seconds, duration_seconds) */
    double offset_seconds;
    double duration_seconds;
    /* NULL, or on_text with each delta's tokens: n_tokens ids and log-probabilities, those decoded since the
       previous delta (TranscribeOptions::on_text_tokens: not the language tag or <asr_text>; tokens of trailing
       whitespace come with no delta), with user_data; the same deltas and threads as on_text */
    void (*on_text_tokens)(const char* delta, const int* ids, const float* logprobs, size_t n_tokens, void* user_data);
} qasr_transcribe_params;

qasr_load_params qasr_default_load_params(void);
qasr_transcribe_params qasr_default_transcribe_params(void);

qasr_status qasr_model_load(const char* model_dir, const qasr_load_params* params, qasr_model** out);
void qasr_model_free(qasr_model* model);

qasr_status qasr_transcribe_file(const qasr_model* model, const char* path, const qasr_transcribe_params* params,
                                 qasr_result** out);
/* An encoded audio file held in memory (WAV; mp3, flac, ogg/opus, m4a ... with FFmpeg). */
qasr_status qasr_transcribe_memory(const qasr_model* model, const void* data, size_t size,
                                   const qasr_transcribe_params* params, qasr_result** out);
/* samples: mono float32 at 16 kHz in [-1, 1]. */
qasr_status qasr_transcribe_pcm(const qasr_model* model, const float* samples, size_t n_samples,
                                const qasr_transcribe_params* params, qasr_result** out);

const char* qasr_result_text(const qasr_result* r);
const char* qasr_result_language(const qasr_result* r);
double qasr_result_language_probability(const qasr_result* r); /* the model's probability of its language tag */
const char* qasr_result_raw_text(const qasr_result* r);
double qasr_result_rtf(const qasr_result* r);
double qasr_result_audio_seconds(const qasr_result* r);
size_t qasr_result_n_tokens(const qasr_result* r);
int qasr_result_token_id(const qasr_result* r, size_t i);         /* -1 when out of range */
float qasr_result_token_logprob(const qasr_result* r, size_t i);  /* 0 when out of range */
const char* qasr_result_finish_reason(const qasr_result* r);      /* "eos", "token_cap", "repetition", "empty" */
/* Segments (qasr::Segment): pieces with a non-empty text, in order; times in seconds. Out of range: 0 / "". */
size_t qasr_result_n_segments(const qasr_result* r);
double qasr_result_segment_start(const qasr_result* r, size_t i);
double qasr_result_segment_end(const qasr_result* r, size_t i);
const char* qasr_result_segment_text(const qasr_result* r, size_t i);
/* The segment's tokens: qasr_result_token_*(r, first) … (first + n − 1); 0 when out of range (and for a stream's final
 * without qasr_stream_params.logprobs, which lists no tokens). */
size_t qasr_result_segment_first_token(const qasr_result* r, size_t i);
size_t qasr_result_segment_n_tokens(const qasr_result* r, size_t i);
/* The result as SubRip ("srt") or WebVTT ("vtt") subtitles; NULL for another format. Valid until qasr_result_free. */
const char* qasr_result_subtitles(qasr_result* r, const char* format);
/* Word timestamps (qasr::AlignedWord), from a forced aligner: qasr_align_* or qasr_result_add_words. */
size_t qasr_result_n_words(const qasr_result* r);
double qasr_result_word_start(const qasr_result* r, size_t i);
double qasr_result_word_end(const qasr_result* r, size_t i);
const char* qasr_result_word_text(const qasr_result* r, size_t i);
void qasr_result_free(qasr_result* r);

/* Forced alignment (qasr::Aligner): a Qwen3-ForcedAligner checkpoint times the words of a known text. Its results
 * are qasr_result handles whose words are filled (text: the given text; no tokens or segments). */
qasr_status qasr_aligner_load(const char* model_dir, const qasr_load_params* params, qasr_aligner** out);
void qasr_aligner_free(qasr_aligner* aligner);
qasr_status qasr_align_pcm(const qasr_aligner* aligner, const float* samples, size_t n_samples, const char* text,
                           qasr_result** out);
qasr_status qasr_align_file(const qasr_aligner* aligner, const char* path, const char* text, qasr_result** out);
/* The words of a transcription result r of these samples, segment by segment (qasr::Aligner::add_words). */
qasr_status qasr_result_add_words(const qasr_aligner* aligner, const float* samples, size_t n_samples, qasr_result* r);

/* Streaming (live dictation). Events arrive through the optional callback (called inside push/finish, on the
 * pushing thread) and through qasr_stream_next_event (polling). */
typedef struct qasr_stream qasr_stream;

typedef struct {
    const char* language;    /* NULL or "": detect */
    const char* context;
    float chunk_seconds;     /* decoding cadence, default 2 */
    int rollback_tokens;     /* default 5 */
    int unfixed_chunks;      /* default 2 */
    int max_segment_windows; /* default 3 (x 8 s) */
    int exact_final;         /* non-zero: final equals the offline transcript (full decode at finish) */
    int itn;                 /* non-zero: inverse text normalization of finals */
    /* Appended in 0.1 (StreamOptions): */
    int speculative;         /* default 1: the previous hypothesis is verified as a draft (greedy-exact) and the final
                                decodes afresh, as offline, so it may revise `stable`; 0: the final continues after the
                                stable text and keeps it (an app that types stable text into a document at once) */
    float pause_seconds;     /* > 0: a quiet stretch this long after speech triggers a step over all audio so far
                                (0.3 is a good value); default 0: off */
    int endpoint_final;      /* non-zero (with pause_seconds): when only quiet followed the last pause step, finish
                                returns that step's transcript without decoding the quiet tail (approximate) */
    int logprobs;            /* non-zero: the final result has tokens with log-probabilities (qasr_result_token_*)
                                and the language tag's probability, as offline results; default 0 */
} qasr_stream_params;

typedef struct {
    int is_final;
    const char* stable;      /* text later partials keep (speculative = 0: the final keeps it too) */
    const char* unstable;    /* tail that may change */
    const char* language;
    double audio_seconds;
} qasr_stream_event;         /* strings valid until the next call on the stream */

typedef void (*qasr_stream_callback)(void* user, const qasr_stream_event* event);

qasr_stream_params qasr_default_stream_params(void);
qasr_status qasr_stream_open(const qasr_model* model, const qasr_stream_params* params, qasr_stream_callback cb,
                             void* user, qasr_stream** out);
qasr_status qasr_stream_push(qasr_stream* s, const float* samples, size_t n_samples);
qasr_status qasr_stream_push_s16le(qasr_stream* s, const uint8_t* bytes, size_t n_bytes);
/* Returns 1 and fills *event when an event is pending, 0 when none is. */
int qasr_stream_next_event(qasr_stream* s, qasr_stream_event* event);
/* Thread-safe, also during qasr_stream_push on another thread: the step in progress stops at its next stage
 * boundary and no further steps run, so qasr_stream_finish starts its final at once (push-to-talk: call it when the
 * key is released). The final transcript does not change. */
void qasr_stream_interrupt(qasr_stream* s);
/* Seconds of quiet since the last speech pushed (Stream::trailing_quiet_seconds); 0 before any speech and while it
 * lasts, and for NULL. Hands-free dictation: finish once it passes a threshold, then open the next stream. */
double qasr_stream_trailing_quiet_seconds(const qasr_stream* s);
qasr_status qasr_stream_finish(qasr_stream* s, qasr_result** out);
void qasr_stream_free(qasr_stream* s);

const char* qasr_version(void);               /* the library's version, "MAJOR.MINOR.PATCH" */
const char* qasr_system_info(void);           /* version, build features, CPU kernels, CUDA devices (lines) */
const char* qasr_last_error(void);            /* message of this thread's last failure ("" if none) */
const char* qasr_status_string(qasr_status s);

#ifdef __cplusplus
}
#endif
#endif
