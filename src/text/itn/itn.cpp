// qasr ITN driver: language selection and dispatch to the English and
// Chinese normalizers. Text is processed line by line so that a newline never
// joins two spoken phrases.
#include "itn.hpp"

#include "en_normalize.hpp"
#include "zh_normalize.hpp"

#include <cctype>

namespace qasr::itn {

namespace {

std::string lower_ascii(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

} // namespace

Language language_from_name(std::string_view name) {
    std::string n = lower_ascii(name);
    while (!n.empty() && std::isspace(static_cast<unsigned char>(n.back()))) n.pop_back();
    while (!n.empty() && std::isspace(static_cast<unsigned char>(n.front()))) n.erase(n.begin());
    // Strip a region/script suffix: "en-US", "zh_CN", "zh-Hans".
    std::string base = n.substr(0, n.find_first_of("-_"));
    if (base == "en" || base == "eng" || base == "english") return Language::English;
    if (base == "zh" || base == "cmn" || base == "chinese" || base == "mandarin" ||
        base == "yue" || base == "cantonese" || base == "zho" || base == "chi")
        return Language::Chinese;
    return Language::Other;
}

std::string_view language_name(Language lang) {
    switch (lang) {
    case Language::English: return "en";
    case Language::Chinese: return "zh";
    case Language::Other: break;
    }
    return "other";
}

std::string normalize(std::string_view text, Language lang) {
    if (lang == Language::Other || text.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size() + 16);
    size_t pos = 0;
    while (pos <= text.size()) {
        size_t nl = text.find('\n', pos);
        std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
        if (lang == Language::English)
            out += en::normalize_line(line);
        else
            out += zh::normalize_line(line);
        if (nl == std::string_view::npos) break;
        out.push_back('\n');
        pos = nl + 1;
    }
    return out;
}

} // namespace qasr::itn
