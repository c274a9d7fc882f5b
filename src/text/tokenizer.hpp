// Qwen2/Qwen3 byte-level BPE (formats.md §3.4): added tokens split first (leftmost, longest), NFC, the Qwen2
// pre-tokenizer regex (PCRE2), GPT-2 byte map, rank-ordered merges. Loads tokenizer.json or
// vocab.json + merges.txt + tokenizer_config.json. Immutable after load; safe to share between threads.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace qasr {

class Tokenizer {
public:
    static Tokenizer load_dir(const std::string& dir); // prefers tokenizer.json, else vocab.json + merges.txt
    static Tokenizer from_tokenizer_json(const std::string& json_text, const std::string& what);
    static Tokenizer from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt,
                                       const std::string& config_json, const std::string& what);
    // No vocabulary (encoding text fails with an Error): the slot a Model's loading moves the real one into once
    // it is read (beside the weights' upload).
    static Tokenizer empty();
    ~Tokenizer();
    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;

    std::vector<int> encode(std::string_view text) const;
    // Bytes of the tokens (special tokens dropped when skip_special); not UTF-8-validated.
    std::string decode_bytes(const std::vector<int>& ids, bool skip_special = true) const;
    // decode_bytes + UTF-8 decoding with replacement (errors="replace").
    std::string decode(const std::vector<int>& ids, bool skip_special = true) const;

    std::optional<int> token_id(std::string_view token) const; // vocab or added token
    bool is_special(int id) const;
    size_t vocab_size() const; // highest id + 1

    struct Impl; // the tables (text/tokenizer_impl.hpp), filled by the loaders

private:
    Tokenizer();
    std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming: feeds ids, returns the newly completed UTF-8 text (an incomplete
// multi-byte tail is held back until the next token completes it or flush() is called).
class TokenTextStream {
public:
    explicit TokenTextStream(const Tokenizer& tok, bool skip_special = true) : tok_(tok), skip_(skip_special) {}
    std::string push(int id);
    std::string flush();

private:
    const Tokenizer& tok_;
    bool skip_;
    std::string pending_;
};

} // namespace qasr
