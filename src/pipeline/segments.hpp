// Segment-level timestamps (subtitles, `verbose_json` segments). Qwen3-ASR itself emits no timestamps, so the audio
// is cut at pauses into pieces of at most `max_seconds`, each piece is transcribed on its own, and a segment's
// times are the speech extent of its piece. Opt-in (TranscribeOptions::segment_seconds): a cut can land inside a
// word where no pause exists within the allowed span, and each piece loses the context of the others.
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace qasr {

// [begin, end) sample ranges covering the audio exactly, in order, none longer than max_seconds. While more than
// max_seconds remain, the next cut goes into the longest pause — a run of at least ten quiet 10 ms frames (RMS at
// most quiet_level), frames counted from `start` — that overlaps [start + max/4, start + max). A long pause (at
// least 0.5 s) ends the piece 200 ms into it and becomes a piece of its own (at most max long, without speech) up to
// 200 ms before the speech after it; a shorter one is cut in its middle, or later so that at most 200 ms of it
// come before the next piece's speech (a model trained on cut utterances can stumble over a long silence around the
// speech: the demo model's 8 clips of a concatenation with 1 s pauses come out as alone 8/8 with this, 4/8 cut in
// the middle). Where no pause overlaps (speech or music throughout) the cut goes to the quietest 100 ms window of
// [start + max/2, start + max) (moving sum of |x|, first minimum; then its first minimum-|x| sample). A quiet end
// of at least 0.5 s is a piece of its own too. level < 0: quiet_level(x) (a caller that has it already passes it).
std::vector<std::pair<size_t, size_t>> split_at_pauses(const std::vector<float>& x, double max_seconds,
                                                       int sample_rate = 16000, float level = -1);

// The level below which a 10 ms frame counts as quiet: 35 dB under the loudest frame's RMS, and never under
// -60 dBFS (RMS 1e-3).
// Of [begin, end) only, where given.
float quiet_level(const std::vector<float>& x, size_t begin = 0, size_t end = size_t(-1));

// The first and last sample of [begin, end)'s 10 ms frames (counted from `begin`) whose RMS exceeds `level`, as
// [first frame's start, last frame's end); {begin, begin} when every frame is quiet.
std::pair<size_t, size_t> speech_extent(const std::vector<float>& x, size_t begin, size_t end, float level);

// Joins the texts of consecutive segments: a space between them unless either side of the seam is a character of
// a script written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar, full-width forms) or already a space.
void append_segment_text(std::string& joined, const std::string& next);
// What append_segment_text puts between `before` and `next`: " " or "" (either empty: "").
const char* segment_joiner(const std::string& before, const std::string& next);

} // namespace qasr
