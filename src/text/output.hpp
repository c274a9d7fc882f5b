// Model output handling (spec §7.3–7.6): repetition fixer, `language X<asr_text>text` parser, language names.
#pragma once
#include "qasr/qasr.hpp"

#include <string>
#include <vector>

namespace qasr {

std::string fix_repetitions(const std::string& text, size_t threshold = 20);

// Python's str.isspace() on one code point, and str.strip() on UTF-8 text (invalid bytes replaced).
bool is_unicode_space(char32_t c);
std::string strip_space(const std::string& s);

struct ParsedOutput {
    std::string language; // "" when none / unknown
    std::string text;
};
// forced_language non-empty: the header was in the prompt, the whole output is text.
ParsedOutput parse_asr_output(const std::string& raw, const std::string& forced_language);
// The model's probability of its language tag: exp of the summed log-probabilities of the generated tokens before
// the first <asr_text> (id asr_text; "language", " English"), 0 where none was written.
double language_tag_probability(const std::vector<TokenInfo>& tokens, int asr_text);

const std::vector<std::string>& supported_languages();
// "english", "EN", " English " → "English"; "auto" → "" (detect); throws qasr::Error for an unsupported name.
std::string canonical_language(const std::string& name);

} // namespace qasr
