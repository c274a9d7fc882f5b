// The process-wide log sink; guarded by a mutex so that sessions on several threads may log.
#include "core/log.hpp"

#include <cstdio>
#include <mutex>

namespace qasr {
namespace {
std::mutex g_mu;
LogSink g_sink;
} // namespace

void set_log_sink(LogSink sink) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_sink = std::move(sink);
}

void log(LogLevel level, const std::string& message) {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_sink) {
        g_sink(level, message);
    } else if (level >= LogLevel::Warn) {
        std::fprintf(stderr, "qasr: %s\n", message.c_str());
    }
}

} // namespace qasr
