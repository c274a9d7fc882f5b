// Text side of forced alignment (spec §9.2, §9.3): the words a transcript is aligned as, and the repair of the
// aligner's raw timestamps into a non-decreasing sequence.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qasr {

// Splits a transcript into the aligner's words: every CJK ideograph is a word of its own; other runs of letters
// (Unicode L*), numbers (N*) and apostrophes between whitespace are words; every other character (punctuation,
// symbols) is dropped without splitting ("don't," → "don't", "a.b" → "ab"). The reference splits Japanese with
// nagisa and Korean with soynlp; this splitter is used for them too (Korean words are space-separated, so the
// result differs little; Japanese kana runs stay one word).
std::vector<std::string> split_alignment_words(const std::string& text);

// Makes the raw timestamps (ms, in word order: start₀, end₀, start₁, …) non-decreasing the way the reference does:
// the longest non-decreasing subsequence (first-found by an O(n²) scan) is kept; a run of at most two other values
// takes the nearer kept neighbour (the left one on a tie), a longer run is interpolated linearly between its kept
// neighbours (or copies the only one); the results are truncated to integers.
std::vector<int64_t> fix_timestamps(const std::vector<double>& raw_ms);

} // namespace qasr
