#include "core/memory.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace qasr {

namespace {

// A cgroup v2 file holding one number ("max" or unreadable: 0).
uint64_t cgroup_value(const char* path) {
    std::ifstream in(path);
    std::string s;
    if (!(in >> s) || s == "max") return 0;
    try {
        return std::stoull(s);
    } catch (...) {
        return 0;
    }
}

} // namespace

uint64_t parse_byte_size(const char* s) {
    if (!s || !*s) return 0;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s || !(v > 0) || v > 1e18) return 0;
    double scale = 1;
    switch (*end) {
    case 'K': case 'k': scale = 1024.0, ++end; break;
    case 'M': case 'm': scale = 1024.0 * 1024, ++end; break;
    case 'G': case 'g': scale = 1024.0 * 1024 * 1024, ++end; break;
    case 'T': case 't': scale = 1024.0 * 1024 * 1024 * 1024, ++end; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b') ++end;
    if (*end) return 0;
    const double bytes = v * scale;
    return bytes >= 1 && bytes < 1.8e19 ? uint64_t(bytes) : 0;
}

uint64_t available_memory_bytes() {
    uint64_t avail = 0;
    if (FILE* f = std::fopen("/proc/meminfo", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f)) {
            unsigned long long kb = 0;
            if (std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = uint64_t(kb) * 1024;
                break;
            }
        }
        std::fclose(f);
    }
    const uint64_t limit = cgroup_value("/sys/fs/cgroup/memory.max"), used = cgroup_value("/sys/fs/cgroup/memory.current");
    if (limit && avail) avail = std::max<uint64_t>(1, std::min(avail, limit > used ? limit - used : 0));
    if (const uint64_t cap = parse_byte_size(std::getenv("QASR_MEMORY_LIMIT"))) avail = avail ? std::min(avail, cap) : cap;
    return avail;
}

} // namespace qasr
