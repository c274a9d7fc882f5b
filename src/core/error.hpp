// fail(): throws qasr::Error (include/qasr/error.hpp, public with its subclasses). Messages start with a bracketed
// component ("[loader] ...") so that the CLI and the C API can print them as one clear line.
#pragma once
#include "qasr/error.hpp"

namespace qasr {

[[noreturn]] inline void fail(std::string_view component, const std::string& message) {
    throw Error(component, message);
}

} // namespace qasr
