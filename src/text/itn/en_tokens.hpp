// English ITN tokenizer: splits a line into "runs" of ASCII words that are
// separated only by blanks (or a single joining hyphen). Punctuation, digits
// and non-ASCII text end a run, so rules never reach across them; a word glued
// to digits or symbols ("x86", "abc@") is never rewritten.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace qasr::itn::en {

struct Word {
    std::string_view orig;  // as written in the input
    std::string lower;      // ASCII lower-cased
    size_t begin = 0;       // byte offsets in the line
    size_t end = 0;
    bool hyphen_before = false; // joined to the previous word by '-'
    bool capitalized() const { return !orig.empty() && orig[0] >= 'A' && orig[0] <= 'Z'; }
};

using Run = std::vector<Word>;

// Splits `line` into runs (in order). Words glued to digits/symbols are dropped.
std::vector<Run> tokenize(std::string_view line);

} // namespace qasr::itn::en
