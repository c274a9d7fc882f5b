// Final-text post-processing applied to transcripts: inverse text normalization for the transcript's language.
#pragma once
#include <string>

namespace qasr {

std::string postprocess_text(const std::string& text, const std::string& language);

} // namespace qasr
