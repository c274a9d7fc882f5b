/* Live transcription through the C API: raw s16le 16 kHz mono on stdin, partial and final text on stdout.
 *   arecord -f S16_LE -r 16000 -c 1 | build/examples/stream_stdin models/demo */
#include <qasr/qasr.h>

#include <stdio.h>

static void on_event(void* user, const qasr_stream_event* e) {
    (void)user;
    printf("%s %s[%s]\n", e->is_final ? "final  " : "partial", e->stable, e->unstable);
    fflush(stdout);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: stream_stdin MODEL_DIR < audio.s16le\n");
        return 2;
    }
    qasr_model* m = NULL;
    if (qasr_model_load(argv[1], NULL, &m) != QASR_OK) {
        fprintf(stderr, "%s\n", qasr_last_error());
        return 1;
    }
    qasr_stream* s = NULL;
    qasr_stream_open(m, NULL, on_event, NULL, &s);
    unsigned char buf[3200];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
        if (qasr_stream_push_s16le(s, buf, n & ~(size_t)1) != QASR_OK) fprintf(stderr, "%s\n", qasr_last_error());
    qasr_result* r = NULL;
    if (qasr_stream_finish(s, &r) == QASR_OK) qasr_result_free(r);
    qasr_stream_free(s);
    qasr_model_free(m);
    return 0;
}
