// load_module (module.hpp). QASR_MODULE_FROM_BIN / QASR_MODULE_FROM_LIB: the install's module directory relative to
// the executable's and to libqasr.so's; QASR_MODULE_BUILD_DIR: the build tree's, looked in only by programs under
// QASR_BUILD_ROOT (the build tree; src/CMakeLists.txt).
#include "core/module.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <vector>

namespace qasr {
namespace {

std::string dir_of(const std::string& path) {
    const size_t s = path.rfind('/');
    return s == std::string::npos ? std::string(".") : path.substr(0, s);
}

std::vector<std::string> candidates(const char* file, const char* env) {
    if (const char* e = env ? std::getenv(env) : nullptr; e && *e) return {e};
    std::vector<std::string> c;
    char buf[PATH_MAX];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    const std::string exe = n > 0 ? std::string(buf, size_t(n)) : std::string();
    Dl_info info{}; // the shared object holding this code (libqasr.so), when it is not the executable
    std::string holder;
    if (::dladdr(reinterpret_cast<void*>(&load_module), &info) && info.dli_fname && info.dli_fname[0] == '/' &&
        exe != info.dli_fname)
        holder = info.dli_fname;
    if (!holder.empty()) c.push_back(dir_of(holder) + "/" QASR_MODULE_FROM_LIB "/" + file);
    if (!exe.empty()) c.push_back(dir_of(exe) + "/" QASR_MODULE_FROM_BIN "/" + file);
    // the build tree's only for programs inside it: an installed program never loads code from where it was built
    const std::string tree = QASR_BUILD_ROOT "/";
    const auto inside = [&](const std::string& p) { return p.compare(0, tree.size(), tree) == 0; }; // ("" is not)
    if (inside(exe) || inside(holder)) c.push_back(std::string(QASR_MODULE_BUILD_DIR "/") + file);
    return c;
}

} // namespace

LoadedModule load_module(const char* file, const char* symbol, const char* env) {
    LoadedModule m;
    for (const std::string& path : candidates(file, env)) {
        void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        const char* why = h ? nullptr : ::dlerror();
        if (h && !(m.symbol = ::dlsym(h, symbol))) {
            ::dlclose(h);
            why = "no such symbol";
        }
        if (!m.symbol) {
            m.where += (m.where.empty() ? "" : "; ") + path + ": " + (why ? why : "cannot load");
            if (h) m.where += std::string(" (") + symbol + ")";
            continue;
        }
        char real[PATH_MAX]; // named without ../ in messages
        m.where = ::realpath(path.c_str(), real) ? std::string(real) : path;
        return m;
    }
    return m;
}

} // namespace qasr
