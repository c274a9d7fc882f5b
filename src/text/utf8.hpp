// UTF-8 helpers: lossy validation (invalid sequences → U+FFFD, one per maximal invalid subpart, like Python's
// errors="replace"), code point iteration, and the incomplete-tail length used by streaming decoders.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qasr::utf8 {

std::string sanitize(std::string_view bytes);                 // valid UTF-8, invalid parts replaced
std::vector<char32_t> decode(std::string_view valid_utf8);   // input must be valid (use sanitize first)
std::string encode(char32_t cp);
std::string encode(const std::vector<char32_t>& cps);
// A character of a script written without spaces between words: Han, kana, CJK punctuation, full-width forms,
// Thai, Lao, Khmer, Myanmar (segment joining and subtitle line breaks).
bool written_without_spaces(char32_t c);
// Columns a character takes in a monospaced line: 2 for CJK and full-width forms, else 1.
int display_width(char32_t c);
// The byte offset of the longest suffix of `valid_utf8` that fits in `columns` display columns (display_width per
// code point; 0 when the whole text fits): a terminal line that shows the end of a long partial transcript.
size_t fitting_tail(std::string_view valid_utf8, int columns);
// Number of trailing bytes that form an incomplete (but so far valid) multi-byte sequence: 0..3.
size_t incomplete_tail(std::string_view bytes);

} // namespace qasr::utf8
