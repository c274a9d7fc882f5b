// Chinese ITN entry point: normalizes one line (no '\n') of spoken-form
// Chinese into written form. See zh_normalize.cpp for the class order.
// Internal to the module; callers use qasr::itn::normalize (itn.hpp).
#pragma once

#include <string>
#include <string_view>

namespace qasr::itn::zh {

std::string normalize_line(std::string_view line);

} // namespace qasr::itn::zh
