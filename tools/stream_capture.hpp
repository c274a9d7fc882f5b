// `qasr stream`'s microphone mode (stream_capture.cpp) and the audio it can save.
#pragma once
#include "pipeline/stream.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qasr::cli {

struct CaptureOptions {
    std::string device;     // "" = the system's default capture device
    double seconds = 0;     // > 0: an utterance ends after this much audio
    bool ptt = false;       // push to talk: Enter starts and stops each utterance
    double auto_finish = 0; // > 0, hands-free: an utterance ends after this many seconds of quiet after speech
    std::string save_audio; // "": none; else the utterance's audio as a WAV file ("-N" before the extension with --ptt
                            // or --auto-finish)
    std::function<void(const TranscriptionResult&)> on_result; // each utterance's final result (--json --logprobs)
};

// Transcribes from the microphone until Enter (or the limit, or Ctrl-C); events go to on_event.
int run_capture(std::shared_ptr<const Model> model, const StreamOptions& so, const CaptureOptions& co,
                const StreamSession::Callback& on_event);
int list_capture_devices(); // --list-devices: one name per line
void save_wav16(const std::string& path, const std::vector<float>& x);

} // namespace qasr::cli
