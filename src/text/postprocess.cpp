// Routes final text through inverse text normalization by language (English, Chinese); others unchanged.
#include "text/postprocess.hpp"

#include "text/itn/itn.hpp"

namespace qasr {

std::string postprocess_text(const std::string& text, const std::string& language) {
    return itn::normalize(text, itn::language_from_name(language));
}

} // namespace qasr
