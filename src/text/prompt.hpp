// The ASR chat prompt (spec §5.1) and the special token ids it needs, resolved from the tokenizer.
#pragma once
#include "text/tokenizer.hpp"

#include <optional>
#include <string>
#include <vector>

namespace qasr {

struct SpecialIds {
    int im_start, im_end, endoftext, audio_start, audio_end, audio_pad, asr_text;
    static SpecialIds resolve(const Tokenizer& tok); // throws when the tokenizer lacks one of them
};

struct Prompt {
    std::vector<int> ids;
    int64_t audio_begin = 0; // index of the first audio pad
    int64_t n_audio = 0;
};

// `language` empty: auto (no suffix); else a canonical name from the supported list (see languages.hpp).
Prompt build_prompt(const Tokenizer& tok, const SpecialIds& sp, int64_t n_audio, const std::string& context,
                    const std::string& language);

} // namespace qasr
