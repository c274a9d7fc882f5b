// Long-audio splitting (spec §8.1): audio longer than the per-request limit (1200 s) is cut near each multiple of
// the limit at the quietest 100 ms window within ±5 s, then at its quietest sample; pieces are transcribed
// independently and their texts joined without a separator (§7.5).
#pragma once
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace qasr {

// [begin, end) sample ranges covering the audio exactly, in order.
std::vector<std::pair<size_t, size_t>> split_long_audio(const std::vector<float>& audio, double limit_seconds = 1200.0,
                                                        int sample_rate = 16000);

// Inside [lo, hi) (hi - lo > win): the quietest `win`-sample window by the moving sum of |x| (its first minimum),
// then that window's first minimum-|x| sample.
size_t quietest_point(const std::vector<float>& x, size_t lo, size_t hi, size_t win);

// Languages of consecutive pieces merged as the toolkit does: empty entries and consecutive duplicates dropped,
// joined with ",".
std::string merge_languages(const std::vector<std::string>& langs);

} // namespace qasr
