#include "text/text_deltas.hpp"

#include "text/output.hpp"
#include "text/utf8.hpp"

#include <utility>

namespace qasr {

TextDeltas::TextDeltas(const Tokenizer& tok, int tag_id, bool in_text, Sink out)
    : stream_(tok, true), out_(std::move(out)), tag_(tag_id), in_text_(in_text) {}

void TextDeltas::push(int id, float logprob) {
    if (!in_text_) { // the language header: nothing of it is text (unless no tag ever comes: finish)
        in_text_ = id == tag_;
        if (in_text_) tokens_.clear();
        else tokens_.push_back({id, logprob});
        return;
    }
    tokens_.push_back({id, logprob});
    emit(stream_.push(id));
}

void TextDeltas::emit(const std::string& ready) {
    if (ready.empty()) return;
    const std::vector<char32_t> cps = utf8::decode(ready);
    size_t b = 0, e = cps.size();
    if (!any_)
        while (b < e && is_unicode_space(cps[b])) ++b;
    while (e > b && is_unicode_space(cps[e - 1])) --e;
    if (e == b) { // whitespace only: held (or dropped before any text)
        if (any_) held_ += utf8::encode(std::vector<char32_t>(cps.begin() + long(b), cps.end()));
        return;
    }
    std::string delta = std::move(held_);
    held_ = utf8::encode(std::vector<char32_t>(cps.begin() + long(e), cps.end()));
    delta += utf8::encode(std::vector<char32_t>(cps.begin() + long(b), cps.begin() + long(e)));
    any_ = true;
    out_(delta, tokens_);
    tokens_.clear();
}

void TextDeltas::finish(const std::string& raw_text) {
    if (in_text_) {
        emit(stream_.flush());
    } else if (const std::string all = strip_space(raw_text); !all.empty()) {
        any_ = true;
        out_(all, tokens_);
    }
    held_.clear();
    tokens_.clear();
}

} // namespace qasr
