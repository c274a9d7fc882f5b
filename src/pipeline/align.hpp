// Forced alignment with Qwen3-ForcedAligner (spec §9): one non-autoregressive pass of the aligner's decoder over
// <|audio_start|> audio <|audio_end|> w₁ <timestamp><timestamp> w₂ <timestamp><timestamp> …; the classifier's
// argmax at each <timestamp> is a time in steps of segment_ms, repaired into a non-decreasing sequence.
#pragma once
#include "model/model.hpp"
#include "qasr/qasr.hpp"
#include "text/align_words.hpp"
#include "text/prompt.hpp"

#include <memory>
#include <string>
#include <vector>

namespace qasr {

struct AlignInput {
    std::vector<std::string> words;
    Prompt prompt;                  // the ids; audio_begin / n_audio as an ASR prompt's
    std::vector<int64_t> positions; // the <timestamp> positions: 2 per word (start, end)
};

// The aligner's input for n_audio encoder rows and `words` (split_alignment_words of the transcript).
AlignInput build_align_input(const Model& m, int64_t n_audio, std::vector<std::string> words);

// Aligns `text` to 16 kHz audio with an aligner model (the CPU ops or its device). Audio shorter than
// min_samples is zero-padded (as for transcription); longer than the classes cover (5000 × 80 ms = 400 s) is an
// error. An empty word list gives an empty result without running the model.
Alignment align_audio(const std::shared_ptr<const Model>& m, const std::vector<float>& audio, const std::string& text,
                      const AlignOptions& opts);

// Per position of `positions`: the argmax class (ties → the lowest) of logits [L, classes].
std::vector<int> timestamp_classes(const Tensor& logits, const std::vector<int64_t>& positions);

} // namespace qasr
