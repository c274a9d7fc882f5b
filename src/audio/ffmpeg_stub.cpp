// Build without FFmpeg: compressed formats are reported as unsupported.
#include "audio/audio.hpp"
#include "core/error.hpp"

namespace qasr {

bool ffmpeg_available() { return false; }

std::string ffmpeg_module_path() { return {}; }

DecodedAudio decode_with_ffmpeg(const uint8_t*, size_t, const std::string& what, double) {
    fail("audio", what + ": not a WAV file (this build has no FFmpeg support for other formats; rebuild with -DQASR_FFMPEG=ON)");
}

} // namespace qasr
