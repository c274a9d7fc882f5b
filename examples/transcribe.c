/* The C API in a few lines: load a model, transcribe a file, print its text and language; what an FFI binding
 * wraps. Built in the tree and, by tests/e2e/install_consumer.sh, against an installed qasr through pkg-config:
 *   cc transcribe.c $(pkg-config --cflags --libs qasr) -o transcribe && ./transcribe models/demo samples/demo_en.wav */
#include <qasr/qasr.h>

#include <stdio.h>

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: transcribe MODEL_DIR AUDIO_FILE   (qasr %s)\n", qasr_version());
        return 2;
    }
    qasr_model* m = NULL;
    qasr_status st = qasr_model_load(argv[1], NULL, &m);
    if (st != QASR_OK) {
        fprintf(stderr, "%s: %s\n", qasr_status_string(st), qasr_last_error());
        return 1;
    }
    qasr_result* r = NULL;
    st = qasr_transcribe_file(m, argv[2], NULL, &r);
    if (st != QASR_OK) {
        fprintf(stderr, "%s: %s\n", qasr_status_string(st), qasr_last_error());
        qasr_model_free(m);
        return 1;
    }
    printf("%s\n", qasr_result_text(r));
    fprintf(stderr, "language %s, %.2f s of audio, RTF %.3f\n", qasr_result_language(r), qasr_result_audio_seconds(r),
            qasr_result_rtf(r));
    qasr_result_free(r);
    qasr_model_free(m);
    return 0;
}
