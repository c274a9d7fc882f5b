// BPE tokenizer implementation. Pre-tokenization uses PCRE2 with UTF + UCP (Unicode properties for \p{L},
// \p{N}, \s); normalization uses utf8proc (NFC).
#include "text/tokenizer.hpp"

#include "core/error.hpp"
#include "text/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace qasr {
namespace {

const char* kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool file_exists(const std::string& path) { return bool(std::ifstream(path)); }

struct AddedToken {
    int id;
    std::string content;
    bool special;
};

} // namespace

struct Tokenizer::Impl {
    std::unordered_map<std::string, int> vocab;  // byte-mapped token string → id
    std::vector<std::string> id_bytes;           // id → raw bytes (vocab tokens)
    std::unordered_map<std::string, int> ranks;  // "left right" → merge rank
    std::vector<AddedToken> added;               // sorted by content length, longest first
    std::unordered_map<int, size_t> added_by_id; // id → index in added
    std::string byte_to_cp[256];                 // byte → UTF-8 of its mapped code point
    std::unordered_map<char32_t, uint8_t> cp_to_byte;
    pcre2_code* re = nullptr;
    size_t n_ids = 0;

    Impl() {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            const char32_t cp = keep ? char32_t(b) : char32_t(256 + n++);
            byte_to_cp[b] = utf8::encode(cp);
            cp_to_byte[cp] = uint8_t(b);
        }
        int err = 0;
        PCRE2_SIZE off = 0;
        re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kQwen2Pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                           &err, &off, nullptr);
        if (!re) fail("tokenizer", "cannot compile the pre-tokenizer regex");
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    }
    ~Impl() { pcre2_code_free(re); }

    void finish(const std::string& what) {
        if (vocab.empty()) fail("tokenizer", what + ": empty vocabulary");
        int max_id = -1;
        for (const auto& [tok, id] : vocab) max_id = std::max(max_id, id);
        for (const auto& a : added) max_id = std::max(max_id, a.id);
        n_ids = size_t(max_id) + 1;
        id_bytes.assign(n_ids, {});
        for (const auto& [tok, id] : vocab) {
            std::string bytes;
            for (char32_t cp : utf8::decode(utf8::sanitize(tok))) {
                auto it = cp_to_byte.find(cp);
                if (it == cp_to_byte.end()) fail("tokenizer", what + ": vocab entry is not byte-level encoded");
                bytes += char(it->second);
            }
            id_bytes[size_t(id)] = std::move(bytes);
        }
        std::sort(added.begin(), added.end(),
                  [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
        for (size_t i = 0; i < added.size(); ++i) added_by_id[added[i].id] = i;
    }

    void add_merge(const std::string& line, int rank) {
        if (line.find(' ') == std::string::npos) return;
        ranks.emplace(line, rank);
    }

    void bpe(const std::string& mapped, std::vector<int>& out) const {
        auto direct = vocab.find(mapped);
        if (direct != vocab.end()) {
            out.push_back(direct->second);
            return;
        }
        std::vector<std::string> parts;
        for (char32_t cp : utf8::decode(mapped)) parts.push_back(utf8::encode(cp));
        while (parts.size() > 1) {
            int best = INT_MAX;
            size_t best_i = 0;
            for (size_t i = 0; i + 1 < parts.size(); ++i) {
                auto it = ranks.find(parts[i] + " " + parts[i + 1]);
                if (it != ranks.end() && it->second < best) {
                    best = it->second;
                    best_i = i;
                }
            }
            if (best == INT_MAX) break;
            const std::string a = parts[best_i], b = parts[best_i + 1];
            std::vector<std::string> merged;
            merged.reserve(parts.size());
            for (size_t i = 0; i < parts.size(); ++i) {
                if (i + 1 < parts.size() && parts[i] == a && parts[i + 1] == b) {
                    merged.push_back(a + b);
                    ++i;
                } else {
                    merged.push_back(parts[i]);
                }
            }
            parts.swap(merged);
        }
        for (const auto& p : parts) {
            auto it = vocab.find(p);
            if (it == vocab.end()) fail("tokenizer", "BPE produced a piece missing from the vocabulary");
            out.push_back(it->second);
        }
    }

    void encode_segment(const std::string& raw, std::vector<int>& out) const {
        if (raw.empty()) return;
        utf8proc_uint8_t* nfc = nullptr;
        const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(raw.data()),
                                                utf8proc_ssize_t(raw.size()), &nfc,
                                                utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
        if (n < 0) fail("tokenizer", "cannot normalize text");
        std::string text(reinterpret_cast<char*>(nfc), size_t(n));
        std::free(nfc);
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
        PCRE2_SIZE start = 0;
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
        while (start < text.size()) {
            const int rc = pcre2_match(re, subject, text.size(), start, 0, md, nullptr);
            if (rc < 0) break; // cannot happen: the last alternatives match any remaining character class
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { // defensive: never loop on an empty match
                ++start;
                continue;
            }
            std::string mapped;
            for (PCRE2_SIZE i = ov[0]; i < ov[1]; ++i) mapped += byte_to_cp[uint8_t(text[i])];
            bpe(mapped, out);
            start = ov[1];
        }
        pcre2_match_data_free(md);
    }
};

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

Tokenizer Tokenizer::from_tokenizer_json(const std::string& text, const std::string& what) {
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(text);
    } catch (const std::exception& e) {
        fail("tokenizer", what + ": not valid JSON: " + e.what());
    }
    if (!j.contains("model") || !j["model"].is_object() || !j["model"].contains("vocab") ||
        !j["model"]["vocab"].is_object() || !j["model"].contains("merges") || !j["model"]["merges"].is_array())
        fail("tokenizer", what + ": expected a BPE model with vocab and merges");
    Tokenizer t;
    Impl& I = *t.impl_;
    for (auto it = j["model"]["vocab"].begin(); it != j["model"]["vocab"].end(); ++it) {
        if (!it.value().is_number_integer() || it.value().get<long long>() < 0 || it.value().get<long long>() > (1 << 24))
            fail("tokenizer", what + ": bad id for vocab entry");
        I.vocab[it.key()] = it.value().get<int>();
    }
    int rank = 0;
    for (const auto& m : j["model"]["merges"]) {
        if (m.is_string()) I.add_merge(m.get<std::string>(), rank++);
        else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
            I.add_merge(m[0].get<std::string>() + " " + m[1].get<std::string>(), rank++);
        else fail("tokenizer", what + ": bad merge entry");
    }
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
        for (const auto& a : j["added_tokens"]) {
            if (!a.contains("id") || !a.contains("content") || !a["id"].is_number_integer() || !a["content"].is_string())
                fail("tokenizer", what + ": bad added_tokens entry");
            I.added.push_back({a["id"].get<int>(), a["content"].get<std::string>(),
                               a.contains("special") && a["special"].is_boolean() && a["special"].get<bool>()});
        }
    I.finish(what);
    return t;
}

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt,
                                       const std::string& config_json, const std::string& what) {
    Tokenizer t;
    Impl& I = *t.impl_;
    try {
        auto v = nlohmann::json::parse(vocab_json);
        for (auto it = v.begin(); it != v.end(); ++it) I.vocab[it.key()] = it.value().get<int>();
        if (!config_json.empty()) {
            auto c = nlohmann::json::parse(config_json);
            if (c.contains("added_tokens_decoder"))
                for (auto it = c["added_tokens_decoder"].begin(); it != c["added_tokens_decoder"].end(); ++it)
                    I.added.push_back({std::stoi(it.key()), it.value()["content"].get<std::string>(),
                                       it.value().value("special", false)});
        }
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        fail("tokenizer", what + ": " + e.what());
    }
    std::istringstream ms(merges_txt);
    std::string line;
    int rank = 0;
    while (std::getline(ms, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        I.add_merge(line, rank++);
    }
    I.finish(what);
    return t;
}

Tokenizer Tokenizer::load_dir(const std::string& dir) {
    if (file_exists(dir + "/tokenizer.json"))
        return from_tokenizer_json(read_file(dir + "/tokenizer.json"), dir + "/tokenizer.json");
    if (file_exists(dir + "/vocab.json") && file_exists(dir + "/merges.txt"))
        return from_vocab_merges(read_file(dir + "/vocab.json"), read_file(dir + "/merges.txt"),
                                 read_file(dir + "/tokenizer_config.json"), dir + "/vocab.json");
    fail("tokenizer", dir + ": no tokenizer.json or vocab.json + merges.txt (run scripts/setup_tokenizer.sh?)");
}

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
