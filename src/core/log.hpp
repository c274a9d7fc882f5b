// Logging through a user callback (never stdout). Default sink: stderr for warnings and errors only.
#pragma once
#include <functional>
#include <string>

namespace qasr {

enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };
using LogSink = std::function<void(LogLevel, const std::string&)>;

void set_log_sink(LogSink sink); // nullptr restores the default
void log(LogLevel level, const std::string& message);

} // namespace qasr
