// Compressed audio through the FFmpeg module (libqasr_ffmpeg.so, ffmpeg_module.cpp; ffmpeg_abi.h says why it is a
// module): loaded with dlopen the first time audio other than WAV is decoded, from, in order,
//   1. QASR_FFMPEG_MODULE (a path), when set;
//   2. next to the program or library holding this code, where `cmake --install` puts it (the executable's
//      ../lib/qasr, libqasr.so's qasr/: QASR_MODULE_FROM_BIN / QASR_MODULE_FROM_LIB);
//   3. the build tree's module directory (QASR_MODULE_BUILD_DIR), for the CLI and tests run where they were built.
// Not found: decoding other formats is an error that lists where it looked; WAV and raw PCM need no module.
#include "audio/audio.hpp"
#include "audio/ffmpeg_abi.h"
#include "core/error.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <string>
#include <vector>

namespace qasr {
namespace {

constexpr const char* kModuleFile = "libqasr_ffmpeg.so";

struct Module {
    QasrFfmpegDecode decode = nullptr;
    std::string where; // the path loaded, or every path tried and why it failed
};

std::string dir_of(const std::string& path) {
    const size_t s = path.rfind('/');
    return s == std::string::npos ? std::string(".") : path.substr(0, s);
}

std::string self_exe() {
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::vector<std::string> candidates() {
    std::vector<std::string> c;
    if (const char* e = std::getenv("QASR_FFMPEG_MODULE"); e && *e) return {e};
    Dl_info info{};
    const std::string exe = self_exe();
    std::string holder; // the shared object holding this code (libqasr.so), when it is not the executable
    if (::dladdr(reinterpret_cast<void*>(&decode_with_ffmpeg), &info) && info.dli_fname && info.dli_fname[0] == '/')
        holder = info.dli_fname;
    if (!holder.empty() && holder != exe) c.push_back(dir_of(holder) + "/" QASR_MODULE_FROM_LIB "/" + kModuleFile);
    if (!exe.empty()) c.push_back(dir_of(exe) + "/" QASR_MODULE_FROM_BIN "/" + kModuleFile);
    c.push_back(std::string(QASR_MODULE_BUILD_DIR "/") + kModuleFile);
    return c;
}

Module load() {
    Module m;
    for (const std::string& path : candidates()) {
        void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            const char* e = ::dlerror();
            m.where += (m.where.empty() ? "" : "; ") + path + ": " + (e ? e : "cannot load");
            continue;
        }
        m.decode = reinterpret_cast<QasrFfmpegDecode>(::dlsym(h, QASR_FFMPEG_SYMBOL));
        if (!m.decode) {
            m.where += (m.where.empty() ? "" : "; ") + path + ": no " QASR_FFMPEG_SYMBOL;
            ::dlclose(h);
            continue;
        }
        char real[PATH_MAX]; // stays loaded for the process; named without ../ for messages
        m.where = ::realpath(path.c_str(), real) ? std::string(real) : path;
        return m;
    }
    return m;
}

const Module& module() {
    static const Module m = load();
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

bool ffmpeg_available() { return module().decode != nullptr; }

std::string ffmpeg_module_path() { return module().decode ? module().where : std::string(); }

DecodedAudio decode_with_ffmpeg(const uint8_t* data, size_t size, const std::string& what, double max_seconds) {
    const Module& m = module();
    if (!m.decode)
        fail("audio", what + ": not a WAV file, and FFmpeg's decoding module (" + kModuleFile + ") was not found: " + m.where);
    DecodedAudio out;
    QasrFfmpegCall call{};
    call.data = data;
    call.size = size;
    call.max_seconds = max_seconds;
    call.append = append;
    call.ctx = &out.samples;
    const int status = m.decode(&call);
    call.message[sizeof call.message - 1] = '\0';
    if (status == QASR_FFMPEG_TOO_LONG) throw TooLong("audio", what + ": longer than the limit of " + seconds_text(max_seconds));
    if (status != QASR_FFMPEG_OK) fail("audio", what + ": " + call.message);
    out.sample_rate = call.sample_rate;
    out.channels = call.channels;
    return out;
}

} // namespace qasr
