// AudioCapture without SDL2: every use is a clear error.
#include "capture.hpp"

#include <stdexcept>

namespace qasr::cli {

namespace {
[[noreturn]] void unavailable() {
    throw std::invalid_argument("this qasr was built without microphone capture: install libsdl2-dev and configure "
                                "with -DQASR_SDL=ON (or pipe a recorder: arecord -f S16_LE -r 16000 -c 1 | qasr stream)");
}
} // namespace

struct AudioCapture::Impl {};
AudioCapture::AudioCapture(const std::string&) { unavailable(); }
AudioCapture::~AudioCapture() = default;
void AudioCapture::read(std::vector<int16_t>&, std::chrono::milliseconds) { unavailable(); }
bool AudioCapture::available() { return false; }
std::string AudioCapture::module_path() { return {}; }
std::vector<std::string> AudioCapture::devices() { unavailable(); }

} // namespace qasr::cli
