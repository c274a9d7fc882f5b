// Output parsing (spec §7.3) and the repetition fixer (§7.4); language names (§7.6); long-audio and pause splitting,
// segment joining and subtitle formats.
#include "core/error.hpp"
#include "pipeline/long_audio.hpp"
#include "pipeline/segments.hpp"
#include "qasr/qasr.hpp"
#include "text/output.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

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
    EXPECT_EQ(canonical_language("auto"), ""); // detect
    EXPECT_EQ(canonical_language(" AUTO"), "");
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

namespace {
// Tone bursts (440 Hz, amplitude 0.3) at the given [start, end) seconds over a -70 dBFS noise floor.
std::vector<float> bursts(double seconds, const std::vector<std::pair<double, double>>& on) {
    std::vector<float> x(size_t(seconds * 16000));
    uint32_t r = 12345;
    for (auto& v : x) {
        r = r * 1664525u + 1013904223u;
        v = 3e-4f * (float(r >> 8) / float(1u << 24) * 2.0f - 1.0f);
    }
    for (const auto& [a, b] : on)
        for (size_t i = size_t(a * 16000); i < size_t(b * 16000); ++i) x[i] = 0.3f * std::sin(6.2831853f * 440.0f * float(i) / 16000.0f);
    return x;
}
} // namespace

TEST(Segments, CutsInsidePausesAndNeverExceedTheLimit) {
    const std::vector<std::pair<double, double>> on = {{0.3, 3.1}, {4.0, 6.2}, {7.0, 9.9}, {10.8, 11.5}, {12.6, 15.2}};
    const auto x = bursts(16.0, on);
    for (double max : {4.0, 5.0, 8.0}) {
        const auto p = split_at_pauses(x, max);
        ASSERT_FALSE(p.empty());
        EXPECT_EQ(p.front().first, 0u);
        EXPECT_EQ(p.back().second, x.size());
        for (size_t i = 0; i < p.size(); ++i) {
            EXPECT_LE(p[i].second - p[i].first, size_t(max * 16000)) << max;
            if (i) {
                EXPECT_EQ(p[i].first, p[i - 1].second);
            }
            if (i + 1 == p.size()) continue;
            const double cut = double(p[i].second) / 16000;
            bool in_pause = true; // no cut inside a burst
            for (const auto& [a, b] : on) in_pause = in_pause && !(cut > a && cut < b);
            EXPECT_TRUE(in_pause) << "max " << max << ": cut at " << cut << " s";
        }
    }
    // max 4 s: each burst alone in a piece that starts and ends 200 ms into the pauses around it (±10 ms frames); the
    // pauses' middles (all longer than 0.5 s) are pieces without speech, and so is the quiet end
    const auto p = split_at_pauses(x, 4.0);
    const float level = quiet_level(x);
    std::vector<std::pair<double, double>> speech_pieces;
    for (const auto& [a, b] : p) {
        if (speech_extent(x, a, b, level).second != a) speech_pieces.emplace_back(double(a) / 16000, double(b) / 16000);
    }
    ASSERT_EQ(speech_pieces.size(), on.size());
    ASSERT_EQ(p.size(), 2 * on.size()); // five bursts, four pause middles, the quiet end
    for (size_t i = 0; i < on.size(); ++i) {
        EXPECT_NEAR(speech_pieces[i].first, i ? on[i].first - 0.2 : 0.0, 0.011) << i;
        EXPECT_NEAR(speech_pieces[i].second, on[i].second + 0.2, 0.011) << i;
    }
    // a long pause wins over a shorter one (150 ms inside a burst) anywhere in the span; a short pause (under 0.5 s)
    // is cut in its middle, or 200 ms before the speech after it
    const auto y = bursts(8.6, {{0.2, 2.0}, {2.15, 3.2}, {4.2, 8.4}});
    const auto q = split_at_pauses(y, 5.0);
    ASSERT_EQ(q.size(), 3u);
    EXPECT_NEAR(double(q[0].second) / 16000, 3.2 + 0.2, 0.011);
    EXPECT_NEAR(double(q[1].second) / 16000, 4.2 - 0.2, 0.011);
    const auto z = split_at_pauses(bursts(7.0, {{0.2, 3.0}, {3.3, 6.8}}), 5.0);
    ASSERT_EQ(z.size(), 2u);
    EXPECT_NEAR(double(z[0].second) / 16000, 3.15, 0.02);
    const auto z2 = split_at_pauses(bursts(7.0, {{0.2, 3.0}, {3.45, 6.8}}), 5.0);
    ASSERT_EQ(z2.size(), 2u);
    EXPECT_NEAR(double(z2[0].second) / 16000, 3.45 - 0.2, 0.02);
    // an hour of silence between two bursts: the silence is in pieces of at most the limit, none with speech
    std::vector<float> h = bursts(2.0, {{0.5, 1.5}});
    h.resize(size_t(16000 * 3602.0), 0.0f);
    const auto tail = bursts(2.0, {{0.5, 1.5}});
    h.insert(h.end(), tail.begin(), tail.end());
    const auto hp = split_at_pauses(h, 10.0);
    int with_speech = 0;
    for (const auto& [a, b] : hp) {
        EXPECT_LE(b - a, 10u * 16000);
        with_speech += speech_extent(h, a, b, quiet_level(h)).second != a;
    }
    EXPECT_EQ(with_speech, 2);
    // no pause anywhere: cuts at the quietest window, pieces still bounded
    const auto tone = bursts(20.0, {{0.0, 20.0}});
    for (const auto& [a, b] : split_at_pauses(tone, 6.0)) EXPECT_LE(b - a, 6u * 16000);
    EXPECT_EQ(split_at_pauses(std::vector<float>(1000, 0.1f), 2.0).size(), 1u);
    EXPECT_EQ(split_at_pauses({}, 2.0).size(), 1u);
}

TEST(Segments, SpeechExtentFindsTheBurstsAndSilenceHasNone) {
    const auto x = bursts(8.0, {{1.0, 2.5}, {4.0, 5.25}});
    const float level = quiet_level(x);
    EXPECT_NEAR(level, 0.3f / std::sqrt(2.0f) * 0.0178f, 2e-4f); // 35 dB under the tone's RMS
    auto [b, e] = speech_extent(x, 0, x.size(), level);
    EXPECT_NEAR(double(b) / 16000, 1.0, 0.011);
    EXPECT_NEAR(double(e) / 16000, 5.25, 0.011);
    std::tie(b, e) = speech_extent(x, 16000 * 3, 16000 * 6, level); // frames counted from the range's start
    EXPECT_NEAR(double(b) / 16000, 4.0, 0.011);
    EXPECT_NEAR(double(e) / 16000, 5.25, 0.011);
    std::tie(b, e) = speech_extent(x, 16000 * 6, x.size(), level);
    EXPECT_EQ(b, e);
    EXPECT_EQ(b, 16000u * 6);
    const std::vector<float> silence(16000, 1e-4f);
    EXPECT_FLOAT_EQ(quiet_level(silence), 1e-3f); // the -60 dBFS floor
    EXPECT_EQ(speech_extent(silence, 0, silence.size(), quiet_level(silence)).second, 0u);
}

TEST(Segments, TextsJoinWithASpaceExceptInUnspacedScripts) {
    std::string s;
    append_segment_text(s, "Hello there.");
    EXPECT_EQ(s, "Hello there.");
    append_segment_text(s, "How are you?");
    EXPECT_EQ(s, "Hello there. How are you?");
    append_segment_text(s, "");
    append_segment_text(s, " Fine");
    EXPECT_EQ(s, "Hello there. How are you? Fine");
    std::string z = "你好。";
    append_segment_text(z, "今天天气很好");
    EXPECT_EQ(z, "你好。今天天气很好");
    append_segment_text(z, "OK");
    EXPECT_EQ(z, "你好。今天天气很好OK");
    std::string j = "こんにちは";
    append_segment_text(j, "世界");
    EXPECT_EQ(j, "こんにちは世界");
    std::string t = "สวัสดี";
    append_segment_text(t, "ครับ");
    EXPECT_EQ(t, "สวัสดีครับ");
    std::string k = "안녕하세요.";
    append_segment_text(k, "감사합니다");
    EXPECT_EQ(k, "안녕하세요. 감사합니다"); // Korean is written with spaces
}

TEST(Segments, SubRipWebVttAndTimestampedLines) {
    std::vector<Segment> s(2);
    s[0].start = 0.0104, s[0].end = 2.6896, s[0].text = "The concert starts at 8:30.";
    s[1].start = 3725.5, s[1].end = 3727.0004, s[1].text = "a --> b\n<i>&\r\nc";
    EXPECT_EQ(to_srt(s), "1\n00:00:00,010 --> 00:00:02,690\nThe concert starts at 8:30.\n\n"
                         "2\n01:02:05,500 --> 01:02:07,000\na -> b <i>& c\n");
    EXPECT_EQ(to_vtt(s), "WEBVTT\n\n00:00:00.010 --> 00:00:02.690\nThe concert starts at 8:30.\n\n"
                         "01:02:05.500 --> 01:02:07.000\na -&gt; b &lt;i&gt;&amp; c\n");
    EXPECT_EQ(to_timestamped_text(s), "[00:00:00.010 --> 00:00:02.690]  The concert starts at 8:30.\n"
                                      "[01:02:05.500 --> 01:02:07.000]  a -> b <i>& c\n");
    // a longer run of dashes cannot leave an arrow behind either (found by the fuzz driver: "--->" gave "-->")
    std::vector<Segment> d(1);
    d[0].end = 1, d[0].text = "a ---> b -----> c --\n> d";
    EXPECT_EQ(to_srt(d), "1\n00:00:00,000 --> 00:00:01,000\na -> b -> c -- > d\n");
    // one at a time (TranscribeOptions::on_segment): the same text
    EXPECT_EQ(to_srt({s[0]}) + "\n" + to_srt({s[1]}, 2), to_srt(s));
    EXPECT_EQ(to_vtt({s[0]}) + to_vtt({s[1]}, false), to_vtt(s));
    // cue lines of at most 42 columns (the default): at spaces, between CJK characters (two columns each), never
    // before closing punctuation; a longer word stays whole; 0: one line
    std::vector<Segment> w(1);
    w[0].end = 4, w[0].text = "And so, my fellow Americans, ask not what your country can do for you, ask what you can do";
    EXPECT_EQ(to_srt(w), "1\n00:00:00,000 --> 00:00:04,000\nAnd so, my fellow Americans, ask not what\n"
                         "your country can do for you, ask what you\ncan do\n");
    EXPECT_EQ(to_srt(w, 1, 0), "1\n00:00:00,000 --> 00:00:04,000\n" + w[0].text + "\n");
    w[0].text = "我们今天在这里举行一个重要的会议，讨论明年的工作计划和预算安排，请大家积极发言。";
    const std::string zh = to_vtt(w, false);
    EXPECT_EQ(zh, "\n00:00:00.000 --> 00:00:04.000\n我们今天在这里举行一个重要的会议，讨论明年\n"
                  "的工作计划和预算安排，请大家积极发言。\n"); // 21 wide characters = 42 columns
    w[0].text = "Supercalifragilisticexpialidocious-and-then-some-more-letters! ok & <b>";
    EXPECT_EQ(to_vtt(w, false, 20), "\n00:00:00.000 --> 00:00:04.000\n"
                                    "Supercalifragilisticexpialidocious-and-then-some-more-letters!\nok &amp; &lt;b&gt;\n");
    EXPECT_EQ(to_srt({}), "");
    EXPECT_EQ(to_vtt({}), "WEBVTT\n");
}
