// qasr inverse text normalization (ITN): public interface.
// Turns spoken-form transcript text into written form ("twenty five dollars"
// -> "$25", "百分之五十" -> "50%") for English and Chinese; every other
// language passes through unchanged. Rule-based, standard library only,
// thread-safe (no mutable global state). See docs/itn.md.
#pragma once

#include <string>
#include <string_view>

namespace qasr::itn {

enum class Language { English, Chinese, Other };

// "English"/"en"/"eng"/"en-US"... -> English; "Chinese"/"zh"/"zh-CN"/"cmn"/
// "Mandarin"/"Cantonese"/"yue"... -> Chinese (case-insensitive); anything
// else -> Other.
Language language_from_name(std::string_view name);

// Short name for a language ("en", "zh", "other").
std::string_view language_name(Language lang);

// Normalize one piece of text (any length, any bytes; invalid UTF-8 is copied
// through). Language::Other returns the input unchanged. Text that is already
// in written form is left as it is.
std::string normalize(std::string_view text, Language lang);

} // namespace qasr::itn
