// Word timestamps for output, shared by `qasr align`, `qasr transcribe --aligner` and `qasr serve` (commands.hpp).
#include "commands.hpp"

namespace qasr::cli {

std::vector<Segment> word_segments(const std::vector<AlignedWord>& words) {
    std::vector<Segment> s;
    s.reserve(words.size());
    for (const AlignedWord& w : words) s.push_back({w.start, w.end, w.text, "", 0, 0});
    return s;
}

nlohmann::json words_json(const std::vector<AlignedWord>& words) {
    nlohmann::json a = nlohmann::json::array();
    for (const AlignedWord& w : words) a.push_back({{"word", w.text}, {"start", w.start}, {"end", w.end}});
    return a;
}

} // namespace qasr::cli
