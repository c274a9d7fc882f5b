// Microphone capture for `qasr stream --capture` (SDL2's audio capture: ALSA, PulseAudio, PipeWire, JACK, ..., in a
// module loaded on first use: capture_module.cpp; on builds without SDL2 every call throws an error that says how to
// enable it). Opened at 16 kHz mono signed 16-bit:
// SDL converts from whatever the device gives.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace qasr::cli {

class AudioCapture {
public:
    // device: a name from devices(), or "" for the system's default capture device. Capture starts at once.
    explicit AudioCapture(const std::string& device);
    ~AudioCapture();
    AudioCapture(const AudioCapture&) = delete;
    AudioCapture& operator=(const AudioCapture&) = delete;

    // Appends the samples captured since the last call (s16 mono 16 kHz), waiting up to `wait` for at least one.
    // Throws when the device stopped (unplugged).
    void read(std::vector<int16_t>& out, std::chrono::milliseconds wait);
    const std::string& name() const { return name_; } // the device's name ("default" for the system's)
    const std::string& driver() const { return driver_; }

    static bool available();                   // the microphone module loads (capture_module.cpp; built with SDL2)
    static std::string module_path();          // its path once loaded, else empty
    static std::vector<std::string> devices(); // capture devices' names

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::string name_, driver_;
};

} // namespace qasr::cli
