// BPE tokenizer implementation. Pre-tokenization uses PCRE2 with UTF + UCP (Unicode properties for \p{L},
// \p{N}, \s); normalization uses utf8proc (NFC).
#include "text/tokenizer.hpp"

#include "text/tokenizer_impl.hpp"

namespace qasr {

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer Tokenizer::empty() { return Tokenizer(); }

std::vector<int> Tokenizer::encode(std::string_view text_in) const {
    const std::string text = utf8::sanitize(text_in);
    std::vector<int> out;
    std::string seg;
    for (size_t i = 0; i < text.size();) {
        const AddedToken* hit = nullptr;
        if (text[i] == '<')
            for (const auto& a : impl_->added) // longest first
                if (text.compare(i, a.content.size(), a.content) == 0) {
                    hit = &a;
                    break;
                }
        if (!hit) {
            seg += text[i++];
            continue;
        }
        impl_->encode_segment(seg, out);
        seg.clear();
        out.push_back(hit->id);
        i += hit->content.size();
    }
    impl_->encode_segment(seg, out);
    return out;
}

std::string Tokenizer::decode_bytes(const std::vector<int>& ids, bool skip_special) const {
    std::string out;
    for (int id : ids) {
        auto a = impl_->added_by_id.find(id);
        if (a != impl_->added_by_id.end()) {
            const AddedToken& t = impl_->added[a->second];
            if (!(skip_special && t.special)) out += t.content;
        } else if (id >= 0 && size_t(id) < impl_->id_bytes.size()) {
            out += impl_->id_bytes[size_t(id)];
        } // ids past the tokenizer (unused embedding rows) decode to nothing, like the reference
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special) const {
    return utf8::sanitize(decode_bytes(ids, skip_special));
}

std::optional<int> Tokenizer::token_id(std::string_view token) const {
    for (const auto& a : impl_->added)
        if (a.content == token) return a.id;
    std::string mapped;
    for (char c : token) mapped += impl_->byte_to_cp[uint8_t(c)];
    auto it = impl_->vocab.find(mapped);
    if (it == impl_->vocab.end()) return std::nullopt;
    return it->second;
}

bool Tokenizer::is_special(int id) const {
    auto a = impl_->added_by_id.find(id);
    return a != impl_->added_by_id.end() && impl_->added[a->second].special;
}

size_t Tokenizer::vocab_size() const { return impl_->n_ids; }

std::string TokenTextStream::push(int id) {
    pending_ += tok_.decode_bytes({id}, skip_);
    const size_t hold = utf8::incomplete_tail(pending_);
    std::string ready = utf8::sanitize(std::string_view(pending_).substr(0, pending_.size() - hold));
    pending_.erase(0, pending_.size() - hold);
    return ready;
}

std::string TokenTextStream::flush() {
    std::string rest = utf8::sanitize(pending_);
    pending_.clear();
    return rest;
}

} // namespace qasr
