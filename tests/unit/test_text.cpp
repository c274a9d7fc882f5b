// Output parsing (spec §7.3) and the repetition fixer (§7.4); language names (§7.6).
#include "core/error.hpp"
#include "pipeline/long_audio.hpp"
#include "text/output.hpp"

#include <gtest/gtest.h>

using namespace qasr;

TEST(Parse, AutoLanguage) {
    auto p = parse_asr_output("language English<asr_text>Hello world.", "");
    EXPECT_EQ(p.language, "English");
    EXPECT_EQ(p.text, "Hello world.");
    p = parse_asr_output("  language CHINESE<asr_text> 你好 ", "");
    EXPECT_EQ(p.language, "Chinese");
    EXPECT_EQ(p.text, "你好");
}

TEST(Parse, NoneEmptyForcedAndMissingTag) {
    auto p = parse_asr_output("language None<asr_text>", "");
    EXPECT_EQ(p.language, "");
    EXPECT_EQ(p.text, "");
    p = parse_asr_output("   \n ", "");
    EXPECT_EQ(p.text, "");
    p = parse_asr_output("Bonjour<asr_text>x", "French");
    EXPECT_EQ(p.language, "French");
    EXPECT_EQ(p.text, "Bonjour<asr_text>x");
    p = parse_asr_output(" just text ", "");
    EXPECT_EQ(p.language, "");
    EXPECT_EQ(p.text, "just text");
    p = parse_asr_output("garbage\nlanguage german\n<asr_text>Hallo", "");
    EXPECT_EQ(p.language, "German");
    EXPECT_EQ(p.text, "Hallo");
}

TEST(Repetition, CharacterRuns) {
    EXPECT_EQ(fix_repetitions(std::string(21, 'a') + "b"), "ab");
    EXPECT_EQ(fix_repetitions(std::string(20, 'a') + "b"), std::string(20, 'a') + "b");
    std::string cjk;
    for (int i = 0; i < 25; ++i) cjk += "哈";
    EXPECT_EQ(fix_repetitions(cjk + "。"), "哈。");
}

TEST(Repetition, PatternRuns) {
    std::string s = "start ";
    for (int i = 0; i < 25; ++i) s += "ab ";
    s += "end";
    EXPECT_EQ(fix_repetitions(s), "start ab end");
    std::string nineteen;
    for (int i = 0; i < 19; ++i) nineteen += "xy";
    EXPECT_EQ(fix_repetitions(nineteen + "z" + std::string(20, '.')), nineteen + "z" + std::string(20, '.'));
}

TEST(Languages, CanonicalNames) {
    EXPECT_EQ(canonical_language("en"), "English");
    EXPECT_EQ(canonical_language(" english "), "English");
    EXPECT_EQ(canonical_language("ZH"), "Chinese");
    EXPECT_EQ(canonical_language("yue"), "Cantonese");
    EXPECT_EQ(supported_languages().size(), 30u);
    EXPECT_THROW(canonical_language("Klingon"), Error);
}

TEST(LongAudio, SplitsAtTheQuietestWindowNearTheLimit) {
    std::vector<float> x(16000 * 25, 0.5f);
    for (size_t i = size_t(16000 * 9.3); i < size_t(16000 * 9.5); ++i) x[i] = 0.0f; // a pause at 9.3–9.5 s
    x[size_t(16000 * 9.4)] = 0.0f;
    const auto p = split_long_audio(x, 10.0);
    ASSERT_EQ(p.size(), 4u); // flat audio elsewhere: later cuts fall at the start of their ±5 s search regions
    EXPECT_EQ(p[0].first, 0u);
    EXPECT_GE(p[0].second, size_t(16000 * 9.3));
    EXPECT_LT(p[0].second, size_t(16000 * 9.5));
    for (size_t i = 1; i < p.size(); ++i) EXPECT_EQ(p[i].first, p[i - 1].second);
    EXPECT_EQ(p.back().second, x.size());
    EXPECT_EQ(split_long_audio(std::vector<float>(1000, 0.1f), 10.0).size(), 1u);
    EXPECT_EQ(merge_languages({"English", "", "English", "Chinese", "Chinese", "English"}), "English,Chinese,English");
}
