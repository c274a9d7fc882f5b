// English ITN entry point: normalizes one line (no '\n') of spoken-form
// English into written form. See en_normalize.cpp for the class order.
// Internal to the module; callers use qasr::itn::normalize (itn.hpp).
#pragma once

#include <string>
#include <string_view>

namespace qasr::itn::en {

std::string normalize_line(std::string_view line);

} // namespace qasr::itn::en
