/* The C interface between the qasr command and its microphone module (libqasr_capture.so, SDL2's audio capture;
 * loaded with dlopen by capture_module.cpp when `qasr stream --capture` or --list-devices runs, so that no other
 * command loads SDL2's ~50 libraries: core/module.hpp). No C++ crosses the boundary. */
#ifndef QASR_CAPTURE_ABI_H
#define QASR_CAPTURE_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QASR_CAPTURE_SYMBOL "qasr_capture_api_v1"

typedef struct QasrCaptureApi {
    /* Opens a capture device (name NULL: the system's default) at 16 kHz mono signed 16-bit and starts it; each
     * buffer goes to on_samples(ctx, ...) from the library's own thread. NULL on failure, with err filled. driver
     * gets the audio driver's name. */
    void* (*open)(const char* name, void (*on_samples)(void* ctx, const int16_t* x, size_t n), void* ctx, char* driver,
                  size_t driver_len, char* err, size_t err_len);
    int (*stopped)(void* handle); /* nonzero: the device stopped (unplugged) */
    void (*close)(void* handle);  /* no on_samples call after it returns */
    /* the capture devices' names, each through add(ctx, name); 0, or -1 with err filled */
    int (*devices)(void (*add)(void* ctx, const char* name), void* ctx, char* err, size_t err_len);
} QasrCaptureApi;

typedef const QasrCaptureApi* (*QasrCaptureApiFn)(void);

#ifdef __cplusplus
}
#endif
#endif
