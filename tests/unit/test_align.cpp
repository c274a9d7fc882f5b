// Forced alignment's text side (spec §9.2, §9.3) and the aligner's config detection. The model side is compared
// with transformers in tests/parity/aligner_parity.cpp.
#include "io/config.hpp"
#include "model/random_checkpoint.hpp"
#include "text/align_words.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

using namespace qasr;
using Words = std::vector<std::string>;

TEST(AlignWords, SplitsAtSpacesAndDropsPunctuationWithoutSplitting) {
    EXPECT_EQ(split_alignment_words("Hello, world! It's 2026."), (Words{"Hello", "world", "It's", "2026"}));
    EXPECT_EQ(split_alignment_words("a.b test-case  O'Neil's"), (Words{"ab", "testcase", "O'Neil's"}));
    EXPECT_EQ(split_alignment_words("  \t\n  "), Words{});
    EXPECT_EQ(split_alignment_words("... !!! ---"), Words{});
    EXPECT_EQ(split_alignment_words("one\ttwo\nthree\u3000four\u00a0five"), (Words{"one", "two", "three", "four", "five"}));
}

TEST(AlignWords, EveryCjkIdeographIsAWord) {
    EXPECT_EQ(split_alignment_words("今天天气很好，我们"), (Words{"今", "天", "天", "气", "很", "好", "我", "们"}));
    // a run of other letters stays together around the ideographs
    EXPECT_EQ(split_alignment_words("Qwen3语音abc识别"), (Words{"Qwen3", "语", "音", "abc", "识", "别"}));
    // kana and hangul are letters, not ideographs: runs (the reference splits Japanese/Korean with other tools)
    EXPECT_EQ(split_alignment_words("こんにちは 안녕하세요"), (Words{"こんにちは", "안녕하세요"}));
    // CJK extension B and compatibility ideographs
    EXPECT_EQ(split_alignment_words("\U00020000\uF900"), (Words{"\U00020000", "\uF900"}));
}

TEST(AlignWords, KeepsOnlyLettersNumbersAndApostrophes) {
    // combining marks (Mn) are dropped, as unicodedata.category does not start with L or N for them
    EXPECT_EQ(split_alignment_words("cafe\u0301 na\u00efve"), (Words{"cafe", "na\u00efve"}));
    // Nl and No numbers are kept; symbols and emoji are dropped
    EXPECT_EQ(split_alignment_words("\u216B \u00BD \U0001F600x $5"), (Words{"\u216B", "\u00BD", "x", "5"}));
    // invalid UTF-8 becomes U+FFFD (a symbol) and is dropped
    EXPECT_EQ(split_alignment_words(std::string("ab\xff" "cd")), (Words{"abcd"}));
}

TEST(AlignTimestamps, RepairsLikeTheReference) {
    using V = std::vector<int64_t>;
    EXPECT_EQ(fix_timestamps({}), V{});
    EXPECT_EQ(fix_timestamps({0, 80, 160}), (V{0, 80, 160}));
    // one outlier between kept values: the nearer neighbour, the left one on a tie
    EXPECT_EQ(fix_timestamps({0, 800, 160, 240}), (V{0, 0, 160, 240}));
    // two outliers: each takes its nearer kept neighbour
    EXPECT_EQ(fix_timestamps({0, 500, 400, 100, 200}), (V{0, 0, 100, 100, 200}));
    // an outlier run without a left neighbour copies the right one; without a right one, the left one
    EXPECT_EQ(fix_timestamps({100, 5, 6, 7, 500}), (V{5, 5, 6, 7, 500}));
    EXPECT_EQ(fix_timestamps({0, 9000, 9000, 9000, 400}), (V{0, 9000, 9000, 9000, 9000}));
    // a run of three or more between kept values is interpolated, then truncated
    EXPECT_EQ(fix_timestamps({0, 50, 60, 70, 10, 20, 30, 100}), (V{0, 50, 60, 70, 77, 85, 92, 100}));
    // equal values are non-decreasing (kept)
    EXPECT_EQ(fix_timestamps({80, 80, 80}), (V{80, 80, 80}));
}

TEST(AlignerConfig, DetectsBothLayoutsAndRejectsABiasedHead) {
    for (const char* layout : {"hf", "original"}) {
        const HParams hp = parse_config_json(preset_config_json("aligner-tiny", layout), layout);
        EXPECT_EQ(hp.aligner.classes, 5000) << layout;
        EXPECT_EQ(hp.aligner.timestamp_token_id, 151705) << layout;
        EXPECT_EQ(hp.aligner.segment_ms, 80.0) << layout;
        EXPECT_EQ(hp.text.vocab_size, 152064) << layout;
        EXPECT_EQ(parse_config_json(preset_config_json("tiny", layout), layout).aligner.classes, 0) << layout;
    }
    // what transformers' save_pretrained writes: id2label instead of num_labels
    nlohmann::json j = nlohmann::json::parse(preset_config_json("aligner-tiny", "hf"));
    j.erase("num_labels");
    j["id2label"] = nlohmann::json::object();
    for (int i = 0; i < 300; ++i) j["id2label"][std::to_string(i)] = "LABEL_" + std::to_string(i);
    EXPECT_EQ(parse_config_json(j.dump(), "id2label").aligner.classes, 300);
    j.erase("id2label");
    EXPECT_THROW(parse_config_json(j.dump(), "no classes"), std::exception);
    j["num_labels"] = 5000;
    j["token_classification_bias"] = true;
    EXPECT_THROW(parse_config_json(j.dump(), "bias"), std::exception);
    j["token_classification_bias"] = false;
    j["timestamp_segment_time"] = -1;
    EXPECT_THROW(parse_config_json(j.dump(), "segment"), std::exception);
}
