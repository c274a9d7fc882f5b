// qasr's exceptions (included by qasr.hpp). Every failure of the library is a qasr::Error, a std::runtime_error
// whose message starts with the bracketed component that failed ("[loader] ...", "[audio] ...", "[options] ...").
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

// Out of memory on a device or host allocation; the model stays usable and a smaller request may succeed.
class OutOfMemory : public Error {
public:
    using Error::Error;
};

// Input longer than a limit the caller set (an upload's duration): the caller's to refuse, not a malformed file.
class TooLong : public Error {
public:
    using Error::Error;
};

// The caller's TranscribeOptions::abort asked the transcription to stop; the model stays usable.
class Cancelled : public Error {
public:
    using Error::Error;
};

} // namespace qasr
