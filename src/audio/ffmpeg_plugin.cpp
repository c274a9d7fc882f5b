// Compressed audio through FFmpeg's module (libqasr_ffmpeg.so, ffmpeg_module.cpp; ffmpeg_abi.h says why it is a
// module), loaded the first time audio other than WAV is decoded (core/module.hpp: where it is looked for;
// QASR_FFMPEG_MODULE names it). Not found: decoding other formats is an error that lists where it looked; WAV and
// raw PCM need no module.
#include "audio/audio.hpp"
#include "audio/ffmpeg_abi.h"
#include "core/error.hpp"
#include "core/module.hpp"

#include <string>
#include <vector>

namespace qasr {
namespace {

constexpr const char* kModuleFile = "libqasr_ffmpeg.so";

const LoadedModule& module() {
    static const LoadedModule m = load_module(kModuleFile, QASR_FFMPEG_SYMBOL, "QASR_FFMPEG_MODULE");
    return m;
}

int append(void* ctx, const float* x, size_t n) noexcept {
    try {
        auto* v = static_cast<std::vector<float>*>(ctx);
        v->insert(v->end(), x, x + n);
        return 0;
    } catch (...) {
        return 1;
    }
}

} // namespace

bool ffmpeg_available() { return module().symbol != nullptr; }

std::string ffmpeg_module_path() { return module().symbol ? module().where : std::string(); }

DecodedAudio decode_with_ffmpeg(const uint8_t* data, size_t size, const std::string& what, double max_seconds) {
    const LoadedModule& m = module();
    if (!m.symbol)
        fail("audio", what + ": not a WAV file, and FFmpeg's decoding module (" + kModuleFile + ") was not found: " + m.where);
    DecodedAudio out;
    QasrFfmpegCall call{};
    call.data = data;
    call.size = size;
    call.max_seconds = max_seconds;
    call.append = append;
    call.ctx = &out.samples;
    const int status = reinterpret_cast<QasrFfmpegDecode>(m.symbol)(&call);
    call.message[sizeof call.message - 1] = '\0';
    if (status == QASR_FFMPEG_TOO_LONG) throw TooLong("audio", what + ": longer than the limit of " + seconds_text(max_seconds));
    if (status != QASR_FFMPEG_OK) fail("audio", what + ": " + call.message);
    out.sample_rate = call.sample_rate;
    out.channels = call.channels;
    return out;
}

} // namespace qasr
