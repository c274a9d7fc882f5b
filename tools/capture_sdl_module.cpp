// The microphone module (libqasr_capture.so; interface in capture_abi.h) on SDL2: SDL's capture thread calls back
// with each buffer, which goes straight to the caller's callback (capture_module.cpp queues it). (Not SDL's own
// queue, SDL_DequeueAudio: its thread gets a 64 KiB stack, less than the static TLS of the libraries qasr links —
// OpenBLAS alone has 60 KiB — so pthread_create refuses it.) SDL's audio subsystem is initialised per open device
// and per device listing (SDL counts the inits). Self-contained: no qasr symbol is used here.
#include "capture_abi.h"

#include <SDL.h>

#include <cstdio>
#include <new>

namespace {

void put(char* buf, size_t len, const char* text) {
    if (buf && len) std::snprintf(buf, len, "%s", text);
}

// SDL's audio subsystem up (counted by SDL: each success is paired with an SDL_QuitSubSystem), else err filled
bool start_audio(char* err, size_t err_len) {
    if (SDL_InitSubSystem(SDL_INIT_AUDIO) == 0) return true;
    if (err && err_len) std::snprintf(err, err_len, "SDL audio could not start: %s", SDL_GetError());
    return false;
}

struct Device {
    SDL_AudioDeviceID id = 0;
    void (*on_samples)(void*, const int16_t*, size_t) = nullptr;
    void* ctx = nullptr;
};

void SDLCALL captured(void* self, Uint8* bytes, int len) {
    auto* d = static_cast<Device*>(self);
    d->on_samples(d->ctx, reinterpret_cast<const int16_t*>(bytes), size_t(len / 2));
}

void* open_device(const char* name, void (*on_samples)(void*, const int16_t*, size_t), void* ctx, char* driver,
                  size_t driver_len, char* err, size_t err_len) {
    if (!start_audio(err, err_len)) return nullptr;
    auto* d = new (std::nothrow) Device{0, on_samples, ctx};
    if (!d) {
        SDL_QuitSubSystem(SDL_INIT_AUDIO);
        put(err, err_len, "out of memory");
        return nullptr;
    }
    SDL_AudioSpec want{}, have{};
    want.freq = 16000;
    want.format = AUDIO_S16SYS;
    want.channels = 1;
    want.samples = 512; // 32 ms
    want.callback = &captured;
    want.userdata = d;
    // no SDL_AUDIO_ALLOW_*_CHANGE: SDL converts the device's own rate, format and channels to this spec
    d->id = SDL_OpenAudioDevice(name, 1, &want, &have, 0);
    const char* drv = SDL_GetCurrentAudioDriver();
    put(driver, driver_len, drv ? drv : "");
    if (!d->id) {
        put(err, err_len, SDL_GetError());
        delete d;
        SDL_QuitSubSystem(SDL_INIT_AUDIO);
        return nullptr;
    }
    SDL_PauseAudioDevice(d->id, 0);
    return d;
}

int device_stopped(void* h) { return SDL_GetAudioDeviceStatus(static_cast<Device*>(h)->id) == SDL_AUDIO_STOPPED; }

void close_device(void* h) {
    auto* d = static_cast<Device*>(h);
    SDL_CloseAudioDevice(d->id); // joins SDL's thread: no callback after this
    delete d;
    SDL_QuitSubSystem(SDL_INIT_AUDIO);
}

int list_devices(void (*add)(void*, const char*), void* ctx, char* err, size_t err_len) {
    if (!start_audio(err, err_len)) return -1;
    const int n = SDL_GetNumAudioDevices(1);
    for (int i = 0; i < n; ++i)
        if (const char* s = SDL_GetAudioDeviceName(i, 1)) add(ctx, s);
    SDL_QuitSubSystem(SDL_INIT_AUDIO);
    return 0;
}

const QasrCaptureApi kApi{open_device, device_stopped, close_device, list_devices};

} // namespace

extern "C" __attribute__((visibility("default"))) const QasrCaptureApi* qasr_capture_api_v1(void) { return &kApi; }
