/* The C API, compiled as C: model load errors, file and PCM transcription, streaming with polling and with a
 * callback. Uses the bundled demo model (skips with exit 77 when its tokenizer is not installed). */
#include "qasr/qasr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: CHECK failed: %s (%s)\n", __FILE__, __LINE__, #cond, qasr_last_error());          \
            ++failures;                                                                                                \
        }                                                                                                              \
    } while (0)

static int n_callbacks = 0, n_finals = 0;
static void on_event(void* user, const qasr_stream_event* e) {
    (void)user;
    ++n_callbacks;
    if (e->is_final) ++n_finals;
}

static char* read_text(const char* path) {
    FILE* f = fopen(path, "rb");
    if (!f) return NULL;
    char* buf = calloc(1, 4096);
    size_t n = fread(buf, 1, 4095, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = 0;
    return buf;
}

static void count_segment(const char* text, double start, double end, void* user) {
    if (text && text[0] && start < end) ++*(int*)user;
}

/* on_text: appends the deltas to the buffer in user (4096 bytes) */
static void append_text(const char* delta, void* user) {
    char* buf = (char*)user;
    if (strlen(buf) + strlen(delta) < 4096) strcat(buf, delta);
}

/* on_text_tokens: user is a struct text_tokens; the deltas appended, their tokens kept (up to 256) */
struct text_tokens {
    char text[4096];
    int ids[256];
    float logprobs[256];
    size_t n, empty_deltas;
};
static void append_text_tokens(const char* delta, const int* ids, const float* logprobs, size_t n, void* user) {
    struct text_tokens* t = (struct text_tokens*)user;
    if (strlen(t->text) + strlen(delta) < sizeof t->text) strcat(t->text, delta);
    if (n == 0) ++t->empty_deltas;
    for (size_t i = 0; i < n && t->n < 256; ++i, ++t->n) t->ids[t->n] = ids[i], t->logprobs[t->n] = logprobs[i];
}

/* on_progress: user is a float[3]: the values seen [0], the last value [1], the ones that went down or out of [0, 1] [2] */
static void track_progress(float fraction, void* user) {
    float* p = (float*)user;
    if (fraction < p[1] || fraction < 0.0f || fraction > 1.0f) p[2] += 1.0f;
    p[0] += 1.0f;
    p[1] = fraction;
}

/* abort_callback: counts its calls in user[0]; non-zero from the user[1]-th call on (0: never) */
static int stop_at_call(void* user) {
    int* c = (int*)user;
    ++c[0];
    return c[1] > 0 && c[0] >= c[1];
}

int main(void) {
    const char* root = QASR_SOURCE_DIR;
    char dir[1024], tok[1100], wav[1100], txt[1100];
    snprintf(dir, sizeof dir, "%s/models/demo", root);
    snprintf(tok, sizeof tok, "%s/tokenizer.json", dir);
    snprintf(wav, sizeof wav, "%s/samples/demo_en.wav", root);
    snprintf(txt, sizeof txt, "%s/samples/demo_en.txt", root);
    FILE* probe = fopen(tok, "rb");
    if (!probe) {
        printf("SKIP: demo model tokenizer not installed (run scripts/build.sh)\n");
        return 77;
    }
    fclose(probe);

    qasr_model* m = NULL;
    CHECK(qasr_model_load("/nonexistent", NULL, &m) == QASR_ERR_MODEL);
    CHECK(m == NULL && strstr(qasr_last_error(), "not a model directory") != NULL);
    CHECK(qasr_model_load(NULL, NULL, &m) == QASR_ERR_INVALID_ARGUMENT);
    {   /* a device that cannot exist: a clear error (no such ordinal, no CUDA build or no driver), no handle */
        qasr_load_params bad = qasr_default_load_params();
        bad.device = "cuda:250";
        bad.warmup = 0;
        CHECK(qasr_model_load(dir, &bad, &m) != QASR_OK && m == NULL);
        CHECK(strstr(qasr_last_error(), "cuda") != NULL || strstr(qasr_last_error(), "CUDA") != NULL);
        bad.device = "tpu";
        CHECK(qasr_model_load(dir, &bad, &m) != QASR_OK && strstr(qasr_last_error(), "unknown device") != NULL);
    }

    qasr_load_params lp = qasr_default_load_params();
    lp.warmup = 0;
    CHECK(lp.max_batch == 1);
    CHECK(lp.compute == NULL);
    {   /* the CPU's products: an unknown choice is refused; bf16 gives the sample's transcript */
        qasr_load_params c = lp;
        c.compute = "fast";
        CHECK(qasr_model_load(dir, &c, &m) == QASR_ERR_INVALID_ARGUMENT && m == NULL && strstr(qasr_last_error(), "compute") != NULL);
        c.compute = "bf16";
        CHECK(qasr_model_load(dir, &c, &m) == QASR_OK);
        qasr_result* rc = NULL;
        char* want_c = read_text(txt);
        CHECK(m && qasr_transcribe_file(m, wav, NULL, &rc) == QASR_OK);
        CHECK(rc && want_c && strcmp(qasr_result_text(rc), want_c) == 0);
        qasr_result_free(rc);
        free(want_c);
        qasr_model_free(m);
        m = NULL;
    }
    {   /* the batch engine: a bad size is refused; a batched model gives the same transcript */
        qasr_load_params b = lp;
        b.max_batch = 0;
        CHECK(qasr_model_load(dir, &b, &m) == QASR_ERR_INVALID_ARGUMENT && m == NULL && strstr(qasr_last_error(), "max_batch") != NULL);
        b.max_batch = 4;
        CHECK(qasr_model_load(dir, &b, &m) == QASR_OK);
        qasr_result* rb = NULL;
        char* want_b = read_text(txt);
        CHECK(m && qasr_transcribe_file(m, wav, NULL, &rb) == QASR_OK);
        CHECK(rb && want_b && strcmp(qasr_result_text(rb), want_b) == 0);
        qasr_result_free(rb);
        free(want_b);
        qasr_model_free(m);
        m = NULL;
    }
    {   /* the aligner: an ASR model is refused with a clear error; NULL handles and empty word lists are safe */
        qasr_aligner* al = NULL;
        CHECK(qasr_aligner_load(dir, &lp, &al) == QASR_ERR_MODEL && al == NULL);
        CHECK(strstr(qasr_last_error(), "not a forced aligner") != NULL);
        CHECK(qasr_aligner_load(NULL, &lp, &al) == QASR_ERR_INVALID_ARGUMENT);
        qasr_result* ar = NULL;
        CHECK(qasr_align_file(NULL, wav, "hello", &ar) == QASR_ERR_INVALID_ARGUMENT && ar == NULL);
        CHECK(qasr_result_n_words(NULL) == 0 && qasr_result_word_start(NULL, 0) == 0.0);
        CHECK(strcmp(qasr_result_word_text(NULL, 3), "") == 0);
    }
    CHECK(qasr_model_load(dir, &lp, &m) == QASR_OK);
    if (!m) return 1;

    qasr_result* r = NULL;
    CHECK(qasr_transcribe_file(m, "/nonexistent.wav", NULL, &r) == QASR_ERR_AUDIO && r == NULL);
    qasr_transcribe_params tp = qasr_default_transcribe_params();
    tp.top_p = 2.0f;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_INVALID_ARGUMENT);
    char* want = read_text(txt);
    CHECK(qasr_transcribe_file(m, wav, NULL, &r) == QASR_OK);
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0);
    CHECK(strcmp(qasr_result_language(r), "English") == 0);
    CHECK(qasr_result_n_tokens(r) > 0 && qasr_result_token_id(r, 0) >= 0 && qasr_result_token_logprob(r, 0) <= 0.0f);
    CHECK(qasr_result_token_id(r, 100000) == -1);
    CHECK(strcmp(qasr_result_finish_reason(r), "eos") == 0);
    CHECK(qasr_result_rtf(r) > 0.0);
    /* one segment (the whole file), inside the 3.04 s sample; subtitles from it */
    CHECK(qasr_result_n_segments(r) == 1 && want && strcmp(qasr_result_segment_text(r, 0), want) == 0);
    CHECK(qasr_result_segment_start(r, 0) >= 0.0 && qasr_result_segment_start(r, 0) < qasr_result_segment_end(r, 0));
    CHECK(qasr_result_segment_end(r, 0) <= 3.04 && qasr_result_segment_end(r, 5) == 0.0);
    /* its tokens: all of the result's */
    CHECK(qasr_result_segment_first_token(r, 0) == 0 && qasr_result_segment_n_tokens(r, 0) == qasr_result_n_tokens(r));
    CHECK(qasr_result_n_tokens(r) > 2 && qasr_result_segment_n_tokens(r, 5) == 0 && qasr_result_segment_n_tokens(NULL, 0) == 0);
    CHECK(strcmp(qasr_result_segment_text(r, 1), "") == 0);
    CHECK(qasr_result_n_words(r) == 0 && qasr_result_word_end(r, 0) == 0.0); /* no aligner: no words */
    const char* srt = qasr_result_subtitles(r, "srt");
    CHECK(srt && strncmp(srt, "1\n00:00:0", 9) == 0 && want && strstr(srt, want) != NULL);
    const char* vtt = qasr_result_subtitles(r, "vtt");
    CHECK(vtt && strncmp(vtt, "WEBVTT\n", 7) == 0);
    CHECK(qasr_result_subtitles(r, "txt") == NULL && qasr_result_subtitles(NULL, "srt") == NULL);
    qasr_result_free(r);
    tp = qasr_default_transcribe_params();
    CHECK(tp.beam_size == 1 && tp.length_penalty == 1.0f);
    tp.beam_size = 3; /* beam search: the same transcript here */
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0 && strcmp(qasr_result_finish_reason(r), "eos") == 0);
    qasr_result_free(r);
    tp.temperature = 0.5f; /* beam search does not sample */
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(strstr(qasr_last_error(), "temperature") != NULL);
    tp = qasr_default_transcribe_params();
    tp.segment_seconds = 1.0; /* below 2 s */
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_INVALID_ARGUMENT && r == NULL);
    tp.segment_seconds = 5.0;
    int live = 0;
    tp.on_segment = count_segment;
    tp.user_data = &live;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && qasr_result_n_segments(r) == 1 && want && strcmp(qasr_result_text(r), want) == 0);
    CHECK(live == 1);
    qasr_result_free(r);
    /* a part: from 1 s for 1.5 s; past the end is an error */
    tp = qasr_default_transcribe_params();
    CHECK(tp.offset_seconds == 0.0 && tp.duration_seconds == 0.0);
    tp.offset_seconds = 1.0;
    tp.duration_seconds = 1.5;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && fabs(qasr_result_audio_seconds(r) - 1.5) < 1e-9 && want && strcmp(qasr_result_text(r), want) != 0);
    CHECK(qasr_result_n_segments(r) <= 1 && (qasr_result_n_segments(r) == 0 || qasr_result_segment_start(r, 0) >= 1.0));
    qasr_result_free(r);
    tp.offset_seconds = 10.0;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(strstr(qasr_last_error(), "past the end") != NULL);
    /* cancellation: abort_callback is asked before stages and steps; non-zero stops with QASR_ERR_CANCELLED */
    tp = qasr_default_transcribe_params();
    CHECK(tp.abort_callback == NULL && tp.abort_user_data == NULL);
    int calls[2] = {0, 0};
    tp.abort_callback = stop_at_call;
    tp.abort_user_data = calls;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK); /* asked, never stopping: the same transcript */
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0);
    const int asked = calls[0];
    CHECK(r && asked > (int)qasr_result_n_tokens(r)); /* every step, and the stages */
    qasr_result_free(r);
    calls[0] = 0;
    calls[1] = asked - 2; /* a few tokens before the end */
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_CANCELLED && r == NULL);
    CHECK(calls[0] == asked - 2 && strstr(qasr_last_error(), "cancelled") != NULL);
    calls[1] = 0;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK && r && want && strcmp(qasr_result_text(r), want) == 0);
    qasr_result_free(r);
    /* the text as it is written: the deltas concatenate to the transcript (the demo text needs no ITN) */
    tp = qasr_default_transcribe_params();
    CHECK(tp.on_text == NULL);
    char text[4096] = "";
    tp.on_text = append_text;
    tp.user_data = text;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && want && strcmp(text, want) == 0 && strcmp(qasr_result_text(r), want) == 0);
    qasr_result_free(r);
    /* with each delta's tokens: the same text; the tokens are the result's, in order, with its log-probabilities */
    tp = qasr_default_transcribe_params();
    CHECK(tp.on_text_tokens == NULL);
    static struct text_tokens tt;
    tp.on_text_tokens = append_text_tokens;
    tp.user_data = &tt;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && want && strcmp(tt.text, want) == 0 && tt.n > 0 && tt.empty_deltas == 0);
    {
        size_t at = 0;
        for (size_t i = 0; r && i < qasr_result_n_tokens(r) && at < tt.n; ++i)
            if (qasr_result_token_id(r, i) == tt.ids[at] && qasr_result_token_logprob(r, i) == tt.logprobs[at]) ++at;
            else CHECK(at == 0); /* contiguous once begun */
        CHECK(at == tt.n);
    }
    qasr_result_free(r);
    /* progress: from 0 up to 1, never down */
    tp = qasr_default_transcribe_params();
    CHECK(tp.on_progress == NULL);
    float progress[3] = {0.0f, 0.0f, 0.0f};
    tp.on_progress = track_progress;
    tp.user_data = progress;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(progress[0] >= 5.0f && progress[1] == 1.0f && progress[2] == 0.0f);
    qasr_result_free(r);
    /* language identification only: the language and its probability, an empty text, a few tokens */
    tp = qasr_default_transcribe_params();
    CHECK(tp.language_only == 0);
    tp.language_only = 1;
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_OK);
    CHECK(r && strcmp(qasr_result_language(r), "English") == 0 && strcmp(qasr_result_text(r), "") == 0);
    CHECK(r && qasr_result_n_tokens(r) >= 2 && qasr_result_n_tokens(r) <= 5);
    CHECK(r && qasr_result_language_probability(r) > 0.5 && qasr_result_language_probability(r) <= 1.0);
    qasr_result_free(r);
    tp.language = "en"; /* a forced language leaves nothing to detect */
    CHECK(qasr_transcribe_file(m, wav, &tp, &r) == QASR_ERR_INVALID_ARGUMENT && r == NULL);
    CHECK(qasr_result_language_probability(NULL) == 0.0);
    /* version and system information */
    CHECK(strlen(qasr_version()) >= 5 && strncmp(qasr_system_info(), "qasr ", 5) == 0);
    CHECK(strstr(qasr_system_info(), qasr_version()) != NULL && strstr(qasr_system_info(), "\ncpu: ") != NULL);

    float nan_pcm[1000] = {0};
    nan_pcm[500] = NAN; /* not a number: an audio error, no result */
    CHECK(qasr_transcribe_pcm(m, nan_pcm, 1000, NULL, &r) == QASR_ERR_AUDIO && r == NULL);
    CHECK(strstr(qasr_last_error(), "sample 500 is NaN") != NULL);
    float silence[100] = {0};
    CHECK(qasr_transcribe_pcm(m, silence, 100, NULL, &r) == QASR_OK); /* < 400 samples: empty, no model run */
    CHECK(r && qasr_result_text(r)[0] == 0 && strcmp(qasr_result_finish_reason(r), "empty") == 0);
    qasr_result_free(r);

    /* Streaming with polling: feed the sample as raw s16le read from the WAV's data (header skipped). */
    FILE* f = fopen(wav, "rb");
    CHECK(f != NULL);
    unsigned char* bytes = malloc(1 << 20);
    size_t n = f ? fread(bytes, 1, 1 << 20, f) : 0;
    if (f) fclose(f);
    /* The same file from memory (an upload): the same transcript; bytes that are not audio: an error. */
    CHECK(qasr_transcribe_memory(m, bytes, n, NULL, &r) == QASR_OK);
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0);
    qasr_result_free(r);
    CHECK(qasr_transcribe_memory(m, "not audio", 9, NULL, &r) != QASR_OK && r == NULL);
    CHECK(qasr_transcribe_memory(m, NULL, 5, NULL, &r) == QASR_ERR_INVALID_ARGUMENT);
    qasr_stream* s = NULL;
    qasr_stream_params sp = qasr_default_stream_params();
    CHECK(sp.logprobs == 0);
    sp.exact_final = 1;
    sp.logprobs = 1; /* the final lists the offline result's tokens, log-probabilities and language probability */
    CHECK(qasr_stream_open(m, &sp, NULL, NULL, &s) == QASR_OK);
    size_t data = 44; /* canonical 44-byte header */
    for (size_t i = data; i + 320 <= n; i += 320) CHECK(qasr_stream_push_s16le(s, bytes + i, 320) == QASR_OK);
    CHECK(qasr_stream_push_s16le(s, bytes, 3) == QASR_ERR_INVALID_ARGUMENT); /* odd byte count */
    CHECK(qasr_stream_finish(s, &r) == QASR_OK);
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0);
    {
        qasr_result* off = NULL;
        CHECK(qasr_transcribe_file(m, wav, NULL, &off) == QASR_OK);
        CHECK(r && off && qasr_result_n_tokens(r) == qasr_result_n_tokens(off) && qasr_result_n_tokens(r) > 2);
        for (size_t i = 0; r && off && i < qasr_result_n_tokens(off); ++i)
            CHECK(qasr_result_token_id(r, i) == qasr_result_token_id(off, i) &&
                  fabs(qasr_result_token_logprob(r, i) - qasr_result_token_logprob(off, i)) < 1e-4);
        CHECK(r && strcmp(qasr_result_finish_reason(r), "eos") == 0);
        CHECK(r && qasr_result_n_segments(r) == 1 && qasr_result_segment_first_token(r, 0) == 0 &&
              qasr_result_segment_n_tokens(r, 0) == qasr_result_n_tokens(r));
        CHECK(r && off && fabs(qasr_result_language_probability(r) - qasr_result_language_probability(off)) < 1e-4 &&
              qasr_result_language_probability(r) > 0.5);
        qasr_result_free(off);
    }
    qasr_result_free(r);
    qasr_stream_free(s);
    sp.logprobs = 0;
    /* The same, interrupted a third of the way in (a key release): later steps do not run, the final is the same. */
    CHECK(qasr_stream_open(m, &sp, NULL, NULL, &s) == QASR_OK);
    for (size_t i = data; i + 320 <= n; i += 320) {
        if (i - data == ((n - data) / 3 / 320) * 320) qasr_stream_interrupt(s);
        CHECK(qasr_stream_push_s16le(s, bytes + i, 320) == QASR_OK);
    }
    qasr_stream_interrupt(NULL); /* no stream: nothing happens */
    CHECK(qasr_stream_trailing_quiet_seconds(NULL) == 0.0);
    {
        static const float quiet[1600]; /* 100 ms of silence after the speech */
        const double before = qasr_stream_trailing_quiet_seconds(s);
        CHECK(qasr_stream_push(s, quiet, 1600) == QASR_OK);
        CHECK(fabs(qasr_stream_trailing_quiet_seconds(s) - before - 0.1) < 1e-9);
    }
    CHECK(qasr_stream_finish(s, &r) == QASR_OK);
    CHECK(r && want && strcmp(qasr_result_text(r), want) == 0);
    qasr_result_free(r);
    qasr_stream_event ev;
    int events = 0, finals = 0;
    while (qasr_stream_next_event(s, &ev)) {
        ++events;
        finals += ev.is_final;
    }
    CHECK(events >= 1 && finals == 1);
    qasr_stream_free(s);

    /* The StreamOptions appended to the parameters: defaults, a bad pause refused, and with speculative = 0 (no ITN,
     * which finals alone get) the final continues after the last partial's stable text. */
    CHECK(sp.speculative == 1 && sp.pause_seconds == 0.0f && sp.endpoint_final == 0);
    sp = qasr_default_stream_params();
    sp.pause_seconds = -1.0f;
    CHECK(qasr_stream_open(m, &sp, NULL, NULL, &s) != QASR_OK && s == NULL);
    CHECK(strstr(qasr_last_error(), "pause_seconds") != NULL);
    sp.pause_seconds = 0.3f;
    sp.speculative = 0;
    sp.itn = 0;
    sp.chunk_seconds = 0.5f;
    CHECK(qasr_stream_open(m, &sp, NULL, NULL, &s) == QASR_OK);
    for (size_t i = data; i + 3200 <= n; i += 3200) CHECK(qasr_stream_push_s16le(s, bytes + i, 3200) == QASR_OK);
    char stable[1024] = "";
    while (qasr_stream_next_event(s, &ev))
        if (!ev.is_final) snprintf(stable, sizeof stable, "%s", ev.stable);
    CHECK(qasr_stream_finish(s, &r) == QASR_OK);
    CHECK(strlen(stable) > 0 && r && strncmp(qasr_result_text(r), stable, strlen(stable)) == 0);
    qasr_result_free(r);
    qasr_stream_free(s);

    /* Streaming with a callback. */
    CHECK(qasr_stream_open(m, NULL, on_event, NULL, &s) == QASR_OK);
    for (size_t i = data; i + 3200 <= n; i += 3200) qasr_stream_push_s16le(s, bytes + i, 3200);
    CHECK(qasr_stream_finish(s, &r) == QASR_OK);
    CHECK(n_callbacks >= 2 && n_finals == 1);
    qasr_result_free(r);
    qasr_stream_free(s);

    free(bytes);
    free(want);
    qasr_model_free(m);
    printf("%d failed\n", failures);
    return failures ? 1 : 0;
}
