// qasr::Error — the one exception type of the library. Messages start with a bracketed component
// ("[loader] ...") so that the CLI and the C API can print them as one clear line.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace qasr {

class Error : public std::runtime_error {
public:
    Error(std::string_view component, const std::string& message) : std::runtime_error(format(component, message)) {}

private:
    static std::string format(std::string_view component, const std::string& message) {
        std::string s;
        s.reserve(component.size() + message.size() + 3);
        s.push_back('[');
        s.append(component);
        s.append("] ");
        s.append(message);
        return s;
    }
};

// Out of memory on a device or host allocation; callers may retry with a smaller request.
class OutOfMemory : public Error {
public:
    using Error::Error;
};

// Input longer than a limit the caller set (an upload's duration): the caller's to refuse, not a malformed file.
class TooLong : public Error {
public:
    using Error::Error;
};

[[noreturn]] inline void fail(std::string_view component, const std::string& message) {
    throw Error(component, message);
}

} // namespace qasr
