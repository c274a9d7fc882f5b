// TextDeltas: the transcript's text as the model writes it, in deltas. Generated ids go in one by one; the text part
// of the output (after the <asr_text> tag, or all of it under a forced language) comes out in whole UTF-8
// characters, its leading whitespace dropped and trailing whitespace held back until more text follows, so that the
// deltas concatenate to the stripped text parse_asr_output (text/output.hpp) starts from — before its repetition
// fix and before inverse text normalization.
#pragma once
#include "qasr/qasr.hpp"
#include "text/tokenizer.hpp"

#include <functional>
#include <string>
#include <vector>

namespace qasr {

class TextDeltas {
public:
    // delta: whole UTF-8 characters; tokens: those pushed since the previous delta (TranscribeOptions::on_text_tokens;
    // none for the flushed end of an incomplete character whose token an earlier delta gave)
    using Sink = std::function<void(const std::string& delta, const std::vector<TokenInfo>& tokens)>;
    // tag_id: the <asr_text> id; in_text: the output is text from its first id (the language was in the prompt).
    TextDeltas(const Tokenizer& tok, int tag_id, bool in_text, Sink out);
    void push(int id, float logprob = 0.0f);
    // The end of the output (raw_text: all of it decoded): the held-back rest; an output that never wrote the tag
    // is all text (as the parser reads it) and comes out here whole.
    void finish(const std::string& raw_text);

private:
    void emit(const std::string& ready);
    TokenTextStream stream_;
    Sink out_;
    int tag_;
    bool in_text_, any_ = false;
    std::string held_; // whitespace after the last character given out
    std::vector<TokenInfo> tokens_; // pushed since the last delta (the header's until the tag: all text without one)
};

} // namespace qasr
