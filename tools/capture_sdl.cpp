// AudioCapture on SDL2: SDL's capture thread calls back with each buffer, which is appended to a queue that read()
// empties. (Not SDL's own queue, SDL_DequeueAudio: its thread gets a 64 KiB stack, less than the static TLS of the
// libraries qasr links — OpenBLAS alone has 60 KiB — so pthread_create refuses it.) SDL's audio subsystem is
// initialised per capture object (SDL counts the inits).
#include "capture.hpp"

#include <SDL.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace qasr::cli {

namespace {
struct SdlAudio { // SDL_InitSubSystem / SDL_QuitSubSystem, counted by SDL
    SdlAudio() {
        if (SDL_InitSubSystem(SDL_INIT_AUDIO) != 0)
            throw std::runtime_error(std::string("microphone capture: SDL audio could not start: ") + SDL_GetError());
    }
    ~SdlAudio() { SDL_QuitSubSystem(SDL_INIT_AUDIO); }
};
} // namespace

struct AudioCapture::Impl {
    SdlAudio sdl;
    SDL_AudioDeviceID dev = 0;
    std::mutex m;
    std::condition_variable cv;
    std::vector<int16_t> queued;
    ~Impl() {
        if (dev) SDL_CloseAudioDevice(dev); // joins SDL's thread: no callback after this
    }
    static void SDLCALL captured(void* self, Uint8* bytes, int len) {
        auto* impl = static_cast<Impl*>(self);
        const auto* x = reinterpret_cast<const int16_t*>(bytes);
        {
            std::lock_guard<std::mutex> lk(impl->m);
            impl->queued.insert(impl->queued.end(), x, x + len / 2);
        }
        impl->cv.notify_one();
    }
};

AudioCapture::AudioCapture(const std::string& device) : impl_(std::make_unique<Impl>()) {
    SDL_AudioSpec want{}, have{};
    want.freq = 16000;
    want.format = AUDIO_S16SYS;
    want.channels = 1;
    want.samples = 512; // 32 ms
    want.callback = &Impl::captured;
    want.userdata = impl_.get();
    // no SDL_AUDIO_ALLOW_*_CHANGE: SDL converts the device's own rate, format and channels to this spec
    impl_->dev = SDL_OpenAudioDevice(device.empty() ? nullptr : device.c_str(), 1, &want, &have, 0);
    if (!impl_->dev) {
        const char* drv = SDL_GetCurrentAudioDriver();
        throw std::runtime_error("microphone capture: cannot open " +
                                 (device.empty() ? std::string("the default capture device") : "capture device \"" + device + "\"") +
                                 " (SDL audio driver " + (drv ? drv : "none") + "): " + SDL_GetError() +
                                 " (qasr stream --list-devices lists the devices)");
    }
    name_ = device.empty() ? "default" : device;
    const char* drv = SDL_GetCurrentAudioDriver();
    driver_ = drv ? drv : "";
    SDL_PauseAudioDevice(impl_->dev, 0);
}

AudioCapture::~AudioCapture() = default;

void AudioCapture::read(std::vector<int16_t>& out, std::chrono::milliseconds wait) {
    if (SDL_GetAudioDeviceStatus(impl_->dev) == SDL_AUDIO_STOPPED)
        throw std::runtime_error("microphone capture: the device \"" + name_ + "\" stopped (unplugged?)");
    std::unique_lock<std::mutex> lk(impl_->m);
    impl_->cv.wait_for(lk, wait, [&] { return !impl_->queued.empty(); });
    out.insert(out.end(), impl_->queued.begin(), impl_->queued.end());
    impl_->queued.clear();
}

bool AudioCapture::available() { return true; }

std::vector<std::string> AudioCapture::devices() {
    SdlAudio sdl;
    std::vector<std::string> names;
    const int n = SDL_GetNumAudioDevices(1);
    for (int i = 0; i < n; ++i)
        if (const char* s = SDL_GetAudioDeviceName(i, 1)) names.emplace_back(s);
    return names;
}

} // namespace qasr::cli
