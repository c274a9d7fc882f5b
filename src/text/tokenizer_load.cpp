// Tokenizer loading: tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json.
// The two big JSON files are read as event streams (nlohmann's SAX interface) straight into the vocabulary and
// merge tables: building a JSON tree of the 6 MB tokenizer.json (~300k std::map nodes) and tearing it down took
// 150–300 ms of every cold start.
#include "text/tokenizer_impl.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

namespace qasr {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return {};
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

bool file_exists(const std::string& path) { return bool(std::ifstream(path)); }

using json = nlohmann::json;
using namespace std::string_view_literals; // key == "model"sv: no strlen per comparison (strlen had 6 % of the load's samples)

// Picks the vocabulary, the merges and the added tokens out of tokenizer.json ("model": {"vocab": {...},
// "merges": [...]}, "added_tokens": [...]) or a flat vocab.json ({token: id, ...}); everything else is skipped.
class TokenizerReader final : public nlohmann::json_sax<json> {
public:
    enum class Kind { TokenizerJson, VocabJson };
    TokenizerReader(Tokenizer::Impl& t, Kind kind, const std::string& what) : t_(t), kind_(kind), what_(what) {}

    void check_complete() const {
        if (kind_ == Kind::TokenizerJson && !(saw_vocab_ && saw_merges_))
            fail("tokenizer", what_ + ": expected a BPE model with vocab and merges");
    }

    bool null() override { return scalar(); }
    bool boolean(bool v) override {
        if (in_added_entry() && field() == "special"sv) added_.special = v;
        return scalar();
    }
    bool number_integer(number_integer_t v) override { return integer(v); }
    bool number_unsigned(number_unsigned_t v) override {
        return integer(v > number_unsigned_t(INT64_MAX) ? INT64_MAX : number_integer_t(v));
    }
    bool number_float(number_float_t, const string_t&) override { return scalar(); }
    bool binary(binary_t&) override { return scalar(); }
    bool string(string_t& v) override {
        if (is_vocab_value()) bad_vocab();
        if (in_merges()) {
            t_.add_merge(std::move(v));
        } else if (in_merge_pair()) {
            if (pair_n_ == 0) pair_ = v;
            else if (pair_n_ == 1) pair_ += " " + v;
            ++pair_n_;
        } else if (in_added_entry() && field() == "content"sv) {
            added_.content = std::move(v);
            has_content_ = true;
        }
        return true;
    }
    bool start_object(std::size_t) override {
        if (is_vocab_value()) bad_vocab();
        if (in_merges() || in_merge_pair()) bad_merge();
        if ((kind_ == Kind::TokenizerJson && st_.size() == 2 && st_[0].key == "model"sv && st_[1].key == "vocab"sv) ||
            (kind_ == Kind::VocabJson && st_.empty())) {
            saw_vocab_ = true;
            t_.vocab.reserve(1 << 17); // Qwen's 151k entries without rehashing
        }
        if (in_added_list()) {
            added_ = {-1, {}, false};
            has_content_ = has_id_ = false;
        }
        st_.push_back({false, {}});
        return true;
    }
    bool key(string_t& k) override {
        st_.back().key = std::move(k);
        return true;
    }
    bool end_object() override {
        st_.pop_back();
        if (in_added_list()) {
            if (!has_id_ || !has_content_) fail("tokenizer", what_ + ": bad added_tokens entry");
            t_.added.push_back(std::move(added_));
        }
        return true;
    }
    bool start_array(std::size_t) override {
        if (is_vocab_value()) bad_vocab();
        if (in_merge_pair()) bad_merge();
        const bool pair = in_merges();
        if (kind_ == Kind::TokenizerJson && st_.size() == 2 && st_[0].key == "model"sv && st_[1].key == "merges"sv) {
            saw_merges_ = true;
            t_.merge_lines.reserve(1 << 17);
        }
        st_.push_back({true, {}});
        if (pair) {
            pair_.clear();
            pair_n_ = 0;
        }
        return true;
    }
    bool end_array() override {
        st_.pop_back();
        if (in_merges()) { // the end of a ["left", "right"] pair
            if (pair_n_ != 2) bad_merge();
            t_.add_merge(pair_);
        }
        return true;
    }
    bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
        fail("tokenizer", what_ + ": not valid JSON: " + e.what());
    }

private:
    struct Frame {
        bool array;
        std::string key; // objects: the key of the value being read
    };

    // Where the value being read sits.
    bool is_vocab_value() const {
        if (kind_ == Kind::VocabJson) return st_.size() == 1 && !st_[0].array;
        return st_.size() == 3 && !st_[0].array && st_[0].key == "model"sv && !st_[1].array && st_[1].key == "vocab"sv &&
               !st_[2].array;
    }
    bool in_merges() const { // directly in model.merges
        return kind_ == Kind::TokenizerJson && st_.size() == 3 && !st_[0].array && st_[0].key == "model"sv &&
               !st_[1].array && st_[1].key == "merges"sv && st_[2].array;
    }
    bool in_merge_pair() const {
        return kind_ == Kind::TokenizerJson && st_.size() == 4 && !st_[0].array && st_[0].key == "model"sv &&
               !st_[1].array && st_[1].key == "merges"sv && st_[2].array && st_[3].array;
    }
    bool in_added_list() const { // directly in added_tokens
        return kind_ == Kind::TokenizerJson && st_.size() == 2 && !st_[0].array && st_[0].key == "added_tokens"sv &&
               st_[1].array;
    }
    bool in_added_entry() const {
        return kind_ == Kind::TokenizerJson && st_.size() == 3 && !st_[0].array && st_[0].key == "added_tokens"sv &&
               st_[1].array && !st_[2].array;
    }
    const std::string& field() const { return st_.back().key; }

    bool integer(number_integer_t v) {
        if (is_vocab_value()) {
            if (v < 0 || v > (1 << 24)) bad_vocab();
            t_.vocab.insert_or_assign(std::move(st_.back().key), int(v));
            return true;
        }
        if (in_added_entry() && field() == "id"sv) {
            if (v < 0 || v > (1 << 24)) fail("tokenizer", what_ + ": bad added_tokens entry");
            added_.id = int(v);
            has_id_ = true;
        }
        return scalar();
    }
    bool scalar() { // a value other than a string or an integer, or an integer where it plays no part
        if (is_vocab_value()) bad_vocab();
        if (in_merges() || in_merge_pair()) bad_merge();
        return true;
    }
    [[noreturn]] void bad_vocab() const { fail("tokenizer", what_ + ": bad id for vocab entry"); }
    [[noreturn]] void bad_merge() const { fail("tokenizer", what_ + ": bad merge entry"); }

    Tokenizer::Impl& t_;
    Kind kind_;
    std::string what_;
    std::vector<Frame> st_;
    bool saw_vocab_ = false, saw_merges_ = false;
    std::string pair_;
    int pair_n_ = 0;
    AddedToken added_{-1, {}, false};
    bool has_content_ = false, has_id_ = false;
};

void read_json(const std::string& text, TokenizerReader& r) {
    try {
        json::sax_parse(text, &r);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        fail("tokenizer", std::string("cannot read JSON: ") + e.what());
    }
}

} // namespace

Tokenizer Tokenizer::from_tokenizer_json(const std::string& text, const std::string& what) {
    Tokenizer t;
    TokenizerReader r(*t.impl_, TokenizerReader::Kind::TokenizerJson, what);
    read_json(text, r);
    r.check_complete();
    t.impl_->finish(what);
    return t;
}

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_json, const std::string& merges_txt,
                                       const std::string& config_json, const std::string& what) {
    Tokenizer t;
    Impl& I = *t.impl_;
    TokenizerReader r(I, TokenizerReader::Kind::VocabJson, what);
    read_json(vocab_json, r);
    try {
        if (!config_json.empty()) {
            auto c = json::parse(config_json);
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

    while (std::getline(ms, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty() || line.rfind("#version", 0) == 0) continue;
        I.add_merge(line);
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

} // namespace qasr
