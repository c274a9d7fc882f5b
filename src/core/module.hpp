// Optional parts of qasr built as modules of their own, loaded with dlopen the first time they are needed (FFmpeg's
// decoding, the CLI's microphone capture): a program that never needs them never loads their libraries (FFmpeg's
// ~100 and SDL2's ~50 took ~60 ms of every start of the qasr command, which starts twice, and ~20 MB).
#pragma once
#include <string>

namespace qasr {

struct LoadedModule {
    void* symbol = nullptr; // the requested symbol; null when no module loaded
    std::string where;      // the module's path, or every path tried and why it failed
};

// Looks for the module file `file` (e.g. "libqasr_ffmpeg.so") in, in order:
//   1. the path in the environment variable `env`, when set (and nowhere else then);
//   2. beside the program or libqasr.so, where `cmake --install` puts it (LIBDIR/qasr);
//   3. the build tree's module directory, for programs inside the build tree (the CLI and tests run where they
//      were built; an installed program never looks there).
// The first that loads and has `symbol` stays loaded for the process.
LoadedModule load_module(const char* file, const char* symbol, const char* env);

} // namespace qasr
