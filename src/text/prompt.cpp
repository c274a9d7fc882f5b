// Prompt ids: <|im_start|>system\n{context}<|im_end|>\n<|im_start|>user\n<|audio_start|>{pad × A}<|audio_end|>
// <|im_end|>\n<|im_start|>assistant\n[language {L}<asr_text>]. Text segments are tokenized whole (spec §5.1).
#include "text/prompt.hpp"

#include "core/error.hpp"

namespace qasr {

SpecialIds SpecialIds::resolve(const Tokenizer& tok) {
    auto need = [&](const char* s) {
        auto id = tok.token_id(s);
        if (!id) fail("tokenizer", std::string("the tokenizer has no ") + s + " token (not a Qwen3-ASR tokenizer?)");
        return *id;
    };
    return {need("<|im_start|>"), need("<|im_end|>"),   need("<|endoftext|>"), need("<|audio_start|>"),
            need("<|audio_end|>"), need("<|audio_pad|>"), need("<asr_text>")};
}

Prompt build_prompt(const Tokenizer& tok, const SpecialIds& sp, int64_t n_audio, const std::string& context,
                    const std::string& language) {
    Prompt p;
    auto text = [&](const std::string& s) {
        auto ids = tok.encode(s);
        p.ids.insert(p.ids.end(), ids.begin(), ids.end());
    };
    // The context is user text: special-token strings inside it are encoded as text only if they are not
    // added tokens; the reference does the same (split_special_tokens=false), so we keep parity.
    p.ids.push_back(sp.im_start);
    text("system\n" + context);
    p.ids.push_back(sp.im_end);
    text("\n");
    p.ids.push_back(sp.im_start);
    text("user\n");
    p.ids.push_back(sp.audio_start);
    p.audio_begin = int64_t(p.ids.size());
    p.n_audio = n_audio;
    p.ids.insert(p.ids.end(), size_t(n_audio), sp.audio_pad);
    p.ids.push_back(sp.audio_end);
    p.ids.push_back(sp.im_end);
    text("\n");
    p.ids.push_back(sp.im_start);
    if (language.empty()) {
        text("assistant\n");
    } else {
        text("assistant\nlanguage " + language);
        p.ids.push_back(sp.asr_text);
    }
    return p;
}

} // namespace qasr
