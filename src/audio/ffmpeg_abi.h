/* The C interface between qasr and its FFmpeg module (libqasr_ffmpeg.so, loaded with dlopen the first time audio
 * other than WAV is decoded: a WAV or raw-PCM user never loads FFmpeg's ~130 libraries, which took ~35 ms of every
 * process start and ~25 MB of memory). One function; no C++ crosses the boundary. */
#ifndef QASR_FFMPEG_ABI_H
#define QASR_FFMPEG_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QASR_FFMPEG_SYMBOL "qasr_ffmpeg_decode_v1"

enum { QASR_FFMPEG_OK = 0, QASR_FFMPEG_ERROR = 1, QASR_FFMPEG_TOO_LONG = 2 };

typedef struct QasrFfmpegCall {
    const uint8_t* data; /* the encoded file */
    size_t size;
    double max_seconds; /* > 0: stop with QASR_FFMPEG_TOO_LONG once more audio than that is decoded */
    /* receives the mono samples at the source rate, in order; nonzero: stop (QASR_FFMPEG_ERROR, message kept) */
    int (*append)(void* ctx, const float* samples, size_t n);
    void* ctx;
    int sample_rate; /* out */
    int channels;    /* out: of the source */
    char message[512]; /* out, on error: what went wrong (the caller names the file) */
} QasrFfmpegCall;

/* returns QASR_FFMPEG_OK, QASR_FFMPEG_ERROR or QASR_FFMPEG_TOO_LONG */
typedef int (*QasrFfmpegDecode)(QasrFfmpegCall* call);

#ifdef __cplusplus
}
#endif
#endif
