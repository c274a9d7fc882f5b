// Logging through a user callback (never stdout). Default sink: stderr for warnings and errors only.
#pragma once
#include "qasr/qasr.hpp" // LogLevel, LogSink, set_log_sink

#include <string>

namespace qasr {

void log(LogLevel level, const std::string& message);

} // namespace qasr
