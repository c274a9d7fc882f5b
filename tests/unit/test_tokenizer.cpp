// Tokenizer tests against the vectors of formats.md §3.5 with the real Qwen3 vocabulary (set up by
// scripts/setup_tokenizer.sh), both loading paths, and UTF-8 round trips.
#include "text/prompt.hpp"
#include "text/output.hpp"
#include "text/text_deltas.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>

using namespace qasr;

namespace {

const Tokenizer* tok_json() {
    static std::unique_ptr<Tokenizer> t = [] {
        std::unique_ptr<Tokenizer> p;
        if (std::filesystem::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json"))
            p = std::make_unique<Tokenizer>(Tokenizer::load_dir(QASR_TOKENIZER_DIR));
        return p;
    }();
    return t.get();
}

#define NEED_TOKENIZER()                                                                                               \
    if (!tok_json()) GTEST_SKIP() << "tokenizer not set up: run scripts/setup_tokenizer.sh"

struct Vec {
    const char* text;
    std::vector<int> ids;
};

const std::vector<Vec>& vectors() {
    static const std::vector<Vec> v = {
        {"Hello world", {9707, 1879}},
        {" Hello world", {21927, 1879}},
        {"Hello, world!", {9707, 11, 1879, 0}},
        {"  one\t two\n\nthree  \n", {220, 825, 197, 1378, 271, 27856, 2303}},
        {"I'm 1234, we're coding.", {40, 2776, 220, 16, 17, 18, 19, 11, 582, 2299, 10822, 13}},
        {"HE'LL DON'T", {1799, 6, 4086, 44273, 17323}},
        {"caf\xC3\xA9 e\xCC\x81", {924, 58858, 3958}},
        {"\xCF\x92\xCC\x81", {149493}},
        {"中文测试：こんにちは。", {104811, 81705, 5122, 89015, 1773}},
        {"你好世界", {108386, 99489}},
        {"Berlin ist die Hauptstadt von Deutschland.", {94409, 5999, 2746, 89931, 44278, 6538, 44979, 13}},
        {"\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB ok", {145233, 378, 235, 145851, 5394}},
        {"language English<asr_text>", {11528, 6364, 151704}},
        {"language Chinese<asr_text>你好世界。", {11528, 8453, 151704, 108386, 99489, 1773}},
        {"language None<asr_text><non_speech>", {11528, 2240, 151704, 151675}},
        {"<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|>",
         {151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669}},
        {"<|audio_end|><|im_end|>\n<|im_start|>assistant\n", {151670, 151645, 198, 151644, 77091, 198}},
    };
    return v;
}

#define EXPECT_THAT_CONTAINS(text, part)                                                                               \
    do {                                                                                                               \
        const std::string t_ = (text);                                                                                 \
        EXPECT_NE(t_.find(part), std::string::npos) << "'" << t_ << "' lacks '" << (part) << "'";                      \
    } while (0)

} // namespace

TEST(Tokenizer, FormatsVectorsTokenizerJson) {
    NEED_TOKENIZER();
    for (const auto& v : vectors()) EXPECT_EQ(tok_json()->encode(v.text), v.ids) << v.text;
}

TEST(Tokenizer, FormatsVectorsVocabMerges) {
    NEED_TOKENIZER();
    const std::string d = QASR_TOKENIZER_DIR;
    auto read = [](const std::string& p) {
        std::ifstream in(p);
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
    };
    Tokenizer t = Tokenizer::from_vocab_merges(read(d + "/vocab.json"), read(d + "/merges.txt"),
                                               read(d + "/tokenizer_config.json"), "slow");
    for (const auto& v : vectors()) EXPECT_EQ(t.encode(v.text), v.ids) << v.text;
}

TEST(Tokenizer, PromptWithThreeAudioPads) {
    NEED_TOKENIZER();
    const SpecialIds sp = SpecialIds::resolve(*tok_json());
    Prompt p = build_prompt(*tok_json(), sp, 3, "", "");
    EXPECT_EQ(p.ids, (std::vector<int>{151644, 8948, 198, 151645, 198, 151644, 872, 198, 151669, 151676, 151676, 151676,
                                       151670, 151645, 198, 151644, 77091, 198}));
    EXPECT_EQ(p.audio_begin, 9);
    Prompt f = build_prompt(*tok_json(), sp, 1, "", "English");
    const std::vector<int> tail(f.ids.end() - 6, f.ids.end());
    EXPECT_EQ(tail, (std::vector<int>{151644, 77091, 198, 11528, 6364, 151704}));
    Prompt c = build_prompt(*tok_json(), sp, 1, "\n\nNames", "");
    EXPECT_EQ(c.ids[1], 8948);
    EXPECT_NE(c.ids[2], 198) << "system\\n\\n\\n must be tokenized as one segment";
}

TEST(Tokenizer, DecodeSkipsSpecialKeepsAsrText) {
    NEED_TOKENIZER();
    const auto ids = tok_json()->encode("<|im_start|>language English<asr_text>Hello world<|im_end|>");
    EXPECT_EQ(tok_json()->decode(ids), "language English<asr_text>Hello world");
    EXPECT_EQ(tok_json()->decode(ids, false), "<|im_start|>language English<asr_text>Hello world<|im_end|>");
}

TEST(Tokenizer, RoundTripUtf8) {
    NEED_TOKENIZER();
    const char* samples[] = {"", "a", "Ünïcödé façade", "日本語のテキストと中文", "emoji 👩‍💻🎉👍🏽 mixed",
                             "tabs\tand\r\nnewlines\n\n", "  leading and trailing  ", "😀😀😀😀😀😀😀😀"};
    for (const char* s : samples) EXPECT_EQ(tok_json()->decode(tok_json()->encode(s)), s) << s;
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        std::string s;
        const int n = int(rng() % 40);
        for (int i = 0; i < n; ++i) {
            const uint32_t kind = rng() % 4;
            char32_t cp = kind == 0 ? 0x20 + rng() % 0x5f : kind == 1 ? 0x4e00 + rng() % 0x5000
                          : kind == 2 ? 0x1f300 + rng() % 0x300 : 0xa0 + rng() % 0x2000;
            if (cp >= 0xd800 && cp < 0xe000) cp = 'x';
            s += utf8::encode(cp);
        }
        // Round trip holds up to NFC normalization; these ranges are NFC-stable except rare composables.
        const std::string back = tok_json()->decode(tok_json()->encode(s));
        EXPECT_EQ(tok_json()->encode(back), tok_json()->encode(s));
    }
}

TEST(Tokenizer, InvalidBytesBecomeReplacementCharacters) {
    NEED_TOKENIZER();
    const std::string bad = std::string("ok\xFF\xFEz\xC3", 6);
    EXPECT_EQ(tok_json()->decode(tok_json()->encode(bad)), "ok\xEF\xBF\xBD\xEF\xBF\xBDz\xEF\xBF\xBD");
}

TEST(Tokenizer, StreamingDecoderHoldsIncompleteUtf8) {
    NEED_TOKENIZER();
    const auto ids = tok_json()->encode("\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB ok 你好");
    TokenTextStream st(*tok_json());
    std::string acc;
    for (int id : ids) {
        std::string piece = st.push(id);
        EXPECT_EQ(utf8::sanitize(piece), piece) << "emitted invalid UTF-8";
        acc += piece;
    }
    acc += st.flush();
    EXPECT_EQ(acc, "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB ok 你好");
}

// TextDeltas (text/text_deltas.hpp): the text part of an output, as it is written, in valid UTF-8 deltas without
// leading or trailing whitespace of the whole: the deltas concatenate to the parser's text (before its repetition
// fix); the header gives none; an output without the tag comes whole at the end.
TEST(Tokenizer, TextDeltasGiveTheParsedTextAsItGrows) {
    NEED_TOKENIZER();
    const int tag = *tok_json()->token_id("<asr_text>");
    const char* outputs[] = {"language English<asr_text>  Hello   wörld, 你好 👩‍💻 end.  \n",
                             "language Chinese<asr_text>日本語のテキストと中文",
                             "language None<asr_text>",
                             "no tag at all, just text ",
                             "language German<asr_text> \t "};
    for (const char* out : outputs) {
        const auto ids = tok_json()->encode(out);
        std::vector<std::string> deltas;
        std::vector<TokenInfo> given; // the deltas' tokens, in order
        TextDeltas td(*tok_json(), tag, false, [&](const std::string& d, const std::vector<TokenInfo>& t) {
            EXPECT_FALSE(t.empty()) << out << ": a delta completes at least one token's text";
            deltas.push_back(d);
            given.insert(given.end(), t.begin(), t.end());
        });
        for (size_t i = 0; i < ids.size(); ++i) td.push(ids[i], -0.5f * float(i));
        const size_t before_end = deltas.size();
        td.finish(tok_json()->decode(ids));
        std::string all;
        for (const auto& d : deltas) {
            EXPECT_FALSE(d.empty()) << out;
            EXPECT_EQ(utf8::sanitize(d), d) << "invalid UTF-8 in a delta of " << out;
            all += d;
        }
        EXPECT_EQ(all, parse_asr_output(tok_json()->decode(ids), "").text) << out;
        if (std::string(out).find("Hello") != std::string::npos) {
            EXPECT_GE(before_end, 5u) << "deltas while writing";
        }
        // the tokens: after the tag (all of them without one), in order with their log-probabilities; their text is
        // the deltas' (up to the whitespace around it: the tokens of trailing whitespace come with no delta)
        const auto tag_at = std::find(ids.begin(), ids.end(), tag);
        const size_t first = tag_at == ids.end() ? 0 : size_t(tag_at - ids.begin()) + 1;
        ASSERT_LE(given.size(), ids.size() - first) << out;
        std::vector<int> given_ids;
        for (size_t i = 0; i < given.size(); ++i) {
            EXPECT_EQ(given[i].id, ids[first + i]) << out << " token " << i;
            EXPECT_EQ(given[i].logprob, -0.5f * float(first + i)) << out << " token " << i;
            given_ids.push_back(given[i].id);
        }
        EXPECT_EQ(strip_space(tok_json()->decode(given_ids)), all) << out;
    }
    // a forced language: the output is all text
    const auto ids = tok_json()->encode(" Guten Tag.");
    std::string all;
    std::vector<int> given_ids;
    TextDeltas td(*tok_json(), tag, true, [&](const std::string& d, const std::vector<TokenInfo>& t) {
        all += d;
        for (const TokenInfo& x : t) given_ids.push_back(x.id);
    });
    for (int id : ids) td.push(id);
    td.finish(tok_json()->decode(ids));
    EXPECT_EQ(all, "Guten Tag.");
    EXPECT_EQ(given_ids, ids);
}

// A small byte-level BPE in both merge notations ("a b" strings and ["a", "b"] pairs), with added tokens and
// fields the loader must skip; no set-up needed.
TEST(Tokenizer, SmallTokenizerJsonBothMergeForms) {
    const std::string vocab = R"({"h": 0, "e": 1, "l": 2, "o": 3, "he": 4, "ll": 5, "llo": 6, "hello": 7, "Ġ": 8})";
    for (const char* merges : {R"(["h e", "l l", "ll o", "he llo"])", R"([["h", "e"], ["l", "l"], ["ll", "o"], ["he", "llo"]])"}) {
        const std::string j = std::string(R"({"version": "1.0", "truncation": null, "normalizer": {"type": "NFC"},
            "added_tokens": [{"id": 9, "content": "<|x|>", "single_word": false, "special": true},
                             {"id": 10, "content": "<y>", "special": false, "extra": {"nested": [1, 2, {"a": null}]}}],
            "model": {"type": "BPE", "dropout": null, "vocab": )") + vocab + R"(, "merges": )" + merges +
                              R"(, "ignore_merges": false}, "decoder": {"type": "ByteLevel", "trim_offsets": [true]}})";
        Tokenizer t = Tokenizer::from_tokenizer_json(j, "small");
        EXPECT_EQ(t.encode("hello<|x|>hel<y>"), (std::vector<int>{7, 9, 4, 2, 10})) << merges;
        EXPECT_EQ(t.vocab_size(), 11u);
        EXPECT_TRUE(t.is_special(9));
        EXPECT_FALSE(t.is_special(10));
        EXPECT_EQ(t.decode({7, 9, 10}, true), "hello<y>");
    }
}

// BPE by id pairs from a heap (what encode uses when every merge joins two vocabulary pieces into one) against the
// string merging that rescans every pair (used otherwise): random tokenizers over "abcd" whose 60 merges are built
// in a valid order, and random words of up to 400 letters (one pre-tokenizer piece each). The second tokenizer adds a
// merge of pieces without ids ("y z", never met here), which sends it down the string path. 3000 words give the same
// ids both ways.
TEST(Tokenizer, HeapMergesEqualTheRescanningMerges) {
    std::mt19937 rng(5);
    for (int round = 0; round < 6; ++round) {
        std::vector<std::string> pieces = {"a", "b", "c", "d"};
        std::vector<std::string> merges;
        while (merges.size() < 60) {
            const std::string& l = pieces[rng() % pieces.size()];
            const std::string& r = pieces[rng() % pieces.size()];
            if (std::find(pieces.begin(), pieces.end(), l + r) != pieces.end()) continue;
            merges.push_back(l + " " + r);
            pieces.push_back(l + r);
        }
        std::string vocab = "{", ms = "[";
        for (size_t i = 0; i < pieces.size(); ++i) vocab += (i ? ", \"" : "\"") + pieces[i] + "\": " + std::to_string(i);
        for (size_t i = 0; i < merges.size(); ++i) ms += (i ? ", \"" : "\"") + merges[i] + "\"";
        const auto load = [&](const std::string& extra) {
            return Tokenizer::from_tokenizer_json(R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(}, "merges": )" +
                                                      ms + extra + "]}}",
                                                  "random");
        };
        const Tokenizer heap = load(""), rescan = load(R"(, "y z")");
        for (int w = 0; w < 500; ++w) {
            std::string word;
            for (int n = int(rng() % (w % 50 == 0 ? 400 : 40)) + 1; n > 0; --n) word += char('a' + rng() % 4);
            ASSERT_EQ(heap.encode(word), rescan.encode(word)) << word;
        }
    }
}

TEST(Tokenizer, MalformedTokenizerJsonIsAClearError) {
    const auto err = [](const std::string& j) {
        try {
            Tokenizer::from_tokenizer_json(j, "t.json");
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("(loaded)");
    };
    const std::string ok_model = R"("model": {"vocab": {"a": 0}, "merges": []})";
    EXPECT_EQ(err("{" + ok_model + "}"), "(loaded)");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"\u4e2d": 0}, "merges": []}})"), "not byte-level encoded");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [)"), "not valid JSON");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}}})"), "expected a BPE model");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": [], "merges": []}})"), "expected a BPE model");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": "0"}, "merges": []}})"), "bad id for vocab entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": -1}, "merges": []}})"), "bad id for vocab entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 99999999999}, "merges": []}})"), "bad id for vocab entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": {}}, "merges": []}})"), "bad id for vocab entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [1]}})"), "bad merge entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [["a"]]}})"), "bad merge entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [["a", "b", "c"]]}})"), "bad merge entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [["a", ["b"]]]}})"), "bad merge entry");
    EXPECT_THAT_CONTAINS(err(R"({"model": {"vocab": {"a": 0}, "merges": [{"a": "b"}]}})"), "bad merge entry");
    EXPECT_THAT_CONTAINS(err(R"({"added_tokens": [{"content": "<x>"}], )" + ok_model + "}"), "bad added_tokens entry");
    EXPECT_THAT_CONTAINS(err(R"({"added_tokens": [{"id": 1}], )" + ok_model + "}"), "bad added_tokens entry");
    EXPECT_THAT_CONTAINS(err(R"({"added_tokens": [{"id": -4, "content": "<x>"}], )" + ok_model + "}"),
                         "bad added_tokens entry");
    EXPECT_THAT_CONTAINS(err(""), "not valid JSON");
    EXPECT_THAT_CONTAINS(err("[1, 2]"), "expected a BPE model");
}

TEST(Utf8, SanitizeLikePythonReplace) {
    EXPECT_EQ(utf8::sanitize("\xE4\xB8"), "\xEF\xBF\xBD");               // truncated 3-byte: one U+FFFD
    EXPECT_EQ(utf8::sanitize("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"); // surrogate
    EXPECT_EQ(utf8::sanitize("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");    // overlong
    EXPECT_EQ(utf8::incomplete_tail("ab\xE4\xB8"), 2u);
    EXPECT_EQ(utf8::incomplete_tail("ab\xE4\xB8\xAD"), 0u);
    EXPECT_EQ(utf8::incomplete_tail("ab\xF0"), 1u);
}

// `qasr stream` on a terminal shows the end of a partial that is longer than the line: the suffix that fits
TEST(Utf8, FittingTailCountsDisplayColumns) {
    EXPECT_EQ(utf8::fitting_tail("hello world", 80), 0u);
    EXPECT_EQ(utf8::fitting_tail("hello world", 5), 6u);                 // "world"
    EXPECT_EQ(utf8::fitting_tail("hello world", 0), 11u);
    EXPECT_EQ(utf8::fitting_tail("", 3), 0u);
    const std::string cjk = "ab\xE4\xBD\xA0\xE5\xA5\xBD";               // ab你好: 2 + 2×2 columns
    EXPECT_EQ(utf8::fitting_tail(cjk, 4), 2u);                           // 你好
    EXPECT_EQ(utf8::fitting_tail(cjk, 3), 5u);                           // 好 (你 would not fit whole)
    EXPECT_EQ(utf8::fitting_tail("\xC3\xA9t\xC3\xA9", 2), 2u);            // été: "té"
}
