// The demo model (models/demo) under the per-call options of TranscribeOptions that report or select: the text as it
// is written (on_text), progress (on_progress), a part of the audio (offset_seconds, duration_seconds).
#include "api/transcriber_impl.hpp"
#include "audio/audio.hpp"
#include "core/error.hpp"
#include "demo_util.hpp"
#include "pipeline/session.hpp"
#include "qasr/qasr.hpp"
#include "text/output.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using qasr_e2e::expected;

// TranscribeOptions::on_text: the deltas come while decoding (before transcribe returns, one per token or so) and
// concatenate to the parsed text before inverse text normalization (the raw output's text part); for a forced
// language, beam search and the pieces of a segmented file (joined as the segments are, live or through a batch
// engine) alike; language identification gives none. on_text_tokens gives the same deltas with their tokens.
TEST(DemoModel, TextDeltasConcatenateToTheTranscript) {
    NEED_DEMO_MODEL();
    const std::string& dir = qasr_e2e::kDemo;
    const auto rows = expected();
    ASSERT_GE(rows.size(), 8u);
    const qasr::Transcriber t = qasr::Transcriber::load(dir);
    std::vector<std::string> deltas, token_deltas;
    std::vector<qasr::TokenInfo> given; // on_text_tokens: the deltas' tokens in order
    qasr::TranscribeOptions o;
    o.itn = false;
    o.on_text = [&](const std::string& d) { deltas.push_back(d); };
    o.on_text_tokens = [&](const std::string& d, const std::vector<qasr::TokenInfo>& tokens) {
        EXPECT_FALSE(tokens.empty()) << d;
        token_deltas.push_back(d);
        given.insert(given.end(), tokens.begin(), tokens.end());
    };
    const auto joined = [&] {
        std::string s;
        for (const auto& d : deltas) s += d;
        return s;
    };
    const qasr::Tokenizer& tok = t.impl().model->tokenizer;
    const int tag = *tok.token_id("<asr_text>");
    // on_text_tokens: the same deltas as on_text; their tokens are each piece's text tokens (after its <asr_text>,
    // all of them under a forced language) with the result's log-probabilities, in order; only whitespace and the
    // end token are left of a piece
    const auto same_tokens = [&](const qasr::TranscriptionResult& r, const std::string& what) {
        EXPECT_EQ(token_deltas, deltas) << what;
        size_t at = 0;
        for (const qasr::Segment& seg : r.segments.empty() ? std::vector<qasr::Segment>{{0, 0, r.text, r.language, 0, r.tokens.size()}}
                                                           : r.segments) {
            size_t b = seg.first_token;
            const size_t e = seg.first_token + seg.n_tokens;
            for (size_t i = b; i < e; ++i)
                if (r.tokens[i].id == tag) b = i + 1;
            std::vector<int> rest;
            for (size_t i = b; i < e; ++i) {
                if (at < given.size() && given[at].id == r.tokens[i].id && given[at].logprob == r.tokens[i].logprob) ++at;
                else rest.push_back(r.tokens[i].id);
            }
            EXPECT_EQ(qasr::strip_space(tok.decode(rest)), "") << what << ": tokens no delta gave";
        }
        EXPECT_EQ(at, given.size()) << what << ": every given token is the result's, in order";
        token_deltas.clear();
        given.clear();
    };
    for (size_t i = 0; i < 8; ++i) {
        const std::string clip = std::string(QASR_SOURCE_DIR) + "/" + rows[i].path;
        deltas.clear();
        const auto r = t.transcribe_file(clip, o);
        EXPECT_EQ(joined(), r.text) << rows[i].path; // the demo model's texts need no repetition fix
        same_tokens(r, rows[i].path);
        EXPECT_GE(deltas.size() * 2, r.tokens.size() - 4) << "a delta every token or two: " << rows[i].path;
        for (const auto& d : deltas) EXPECT_FALSE(d.empty());
        qasr::TranscribeOptions forced = o;
        forced.language = rows[i].language;
        deltas.clear();
        const auto f = t.transcribe_file(clip, forced);
        EXPECT_EQ(joined(), f.text) << rows[i].path;
        same_tokens(f, rows[i].path + " (forced)");
        qasr::TranscribeOptions beams = o;
        beams.decode.beam_size = 3;
        deltas.clear();
        const auto bs = t.transcribe_file(clip, beams);
        EXPECT_EQ(joined(), bs.text) << rows[i].path;
        same_tokens(bs, rows[i].path + " (beams)");
        qasr::TranscribeOptions id = o;
        id.language_only = true;
        deltas.clear();
        t.transcribe_file(clip, id);
        EXPECT_TRUE(deltas.empty());
        EXPECT_TRUE(given.empty());
    }
    // ITN applies to the final text only: the deltas are the model's words
    qasr::TranscribeOptions itn = o;
    itn.itn = true;
    itn.on_text_tokens = nullptr;
    const std::string sample = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    deltas.clear();
    const std::string plain = t.transcribe_file(sample, o).text;
    deltas.clear();
    t.transcribe_file(sample, itn);
    EXPECT_EQ(joined(), plain);

    // a file of two clips in two segments: the deltas are the segments' texts joined, live and through an engine
    std::vector<float> two = qasr::load_audio_file(std::string(QASR_SOURCE_DIR) + "/" + rows[0].path);
    two.insert(two.end(), 16000, 0.0f);
    const auto b = qasr::load_audio_file(std::string(QASR_SOURCE_DIR) + "/" + rows[1].path);
    two.insert(two.end(), b.begin(), b.end());
    qasr::TranscribeOptions seg = o;
    seg.segment_seconds = std::max(2.0, double(std::max(b.size(), two.size() - b.size() - 16000)) / 16000 + 0.5);
    qasr::LoadOptions lo;
    lo.max_batch = 2;
    const qasr::Transcriber bt = qasr::Transcriber::load(dir, lo);
    for (const qasr::Transcriber* tr : {&t, &bt}) {
        deltas.clear();
        token_deltas.clear();
        given.clear();
        const auto r = tr->transcribe(two, seg);
        ASSERT_EQ(r.segments.size(), 2u) << r.text;
        EXPECT_EQ(joined(), r.text);
        same_tokens(r, tr == &t ? "two segments" : "two segments, engine");
    }
}

// TranscribeOptions::on_progress: 0 first, non-decreasing values at least 0.005 apart that move while the model
// runs (several before the decode ends), and exactly one 1 as the call returns; alike for beam search, language
// identification, a segmented file (one piece at a time: within pieces too; through a batch engine: as pieces are
// taken), audio too short to transcribe, and none after a cancellation.
TEST(DemoModel, ProgressGrowsToOneOnce) {
    NEED_DEMO_MODEL();
    const std::string& dir = qasr_e2e::kDemo;
    const auto rows = expected();
    ASSERT_GE(rows.size(), 2u);
    const qasr::Transcriber t = qasr::Transcriber::load(dir);
    std::vector<float> seen;
    size_t tokens_when_half = 0, tokens_now = 0;
    qasr::TranscribeOptions o;
    o.on_progress = [&](float f) {
        if (f >= 0.5f && !tokens_when_half) tokens_when_half = tokens_now + 1;
        seen.push_back(f);
    };
    o.on_text = [&](const std::string&) { ++tokens_now; };
    const auto check = [&](const std::string& what, size_t min_values) {
        SCOPED_TRACE(what);
        ASSERT_GE(seen.size(), min_values);
        EXPECT_EQ(seen.front(), 0.0f);
        EXPECT_EQ(seen.back(), 1.0f);
        for (size_t i = 1; i + 1 < seen.size(); ++i) { // the last, 1, comes whatever the step
            EXPECT_GE(seen[i] - seen[i - 1], 0.005f - 1e-6f) << "value " << i;
            EXPECT_LT(seen[i], 1.0f) << "value " << i;
        }
        EXPECT_GT(seen.back(), seen[seen.size() - 2]);
    };
    const std::string clip = std::string(QASR_SOURCE_DIR) + "/" + rows[0].path;
    const auto r = t.transcribe_file(clip, o);
    check("greedy", 8);
    EXPECT_GT(tokens_when_half, 0u) << "half way was reported while the text was being written";
    EXPECT_LT(tokens_when_half, r.tokens.size()) << "half way was reported while the text was being written";
    seen.clear();
    qasr::TranscribeOptions beams = o;
    beams.decode.beam_size = 3;
    t.transcribe_file(clip, beams);
    check("beam search", 8);
    seen.clear();
    qasr::TranscribeOptions id = o;
    id.language_only = true;
    t.transcribe_file(clip, id);
    check("language identification", 3);
    seen.clear();
    t.transcribe(std::vector<float>(300, 0.0f), o);
    check("too short", 2);

    // a file of two clips in two segments: one piece at a time and through a batch engine
    std::vector<float> two = qasr::load_audio_file(clip);
    two.insert(two.end(), 16000, 0.0f);
    const auto b = qasr::load_audio_file(std::string(QASR_SOURCE_DIR) + "/" + rows[1].path);
    const size_t first = two.size();
    two.insert(two.end(), b.begin(), b.end());
    qasr::TranscribeOptions seg = o;
    seg.segment_seconds = std::max(2.0, double(std::max(b.size(), first - 16000)) / 16000 + 0.5);
    seen.clear();
    ASSERT_EQ(t.transcribe(two, seg).segments.size(), 2u);
    check("segmented", 10);
    qasr::LoadOptions lo;
    lo.max_batch = 2;
    const qasr::Transcriber bt = qasr::Transcriber::load(dir, lo);
    seen.clear();
    ASSERT_EQ(bt.transcribe(two, seg).segments.size(), 2u);
    check("segmented, pieces at once", 3); // 0, the first piece taken, 1

    // cancelled in the decode: values were reported, no 1
    seen.clear();
    int asks = 0;
    qasr::TranscribeOptions stop = o;
    stop.abort = [&] { return ++asks > 12; };
    EXPECT_THROW(t.transcribe_file(clip, stop), qasr::Cancelled);
    ASSERT_FALSE(seen.empty());
    EXPECT_LT(seen.back(), 1.0f);
}

// offset_seconds / duration_seconds (`--offset`, `--duration`): the part is transcribed exactly as its samples alone
// (same tokens), whole or cut at pauses, with the segments' times moved to the whole audio's (also those given to
// on_segment); the duration stops at the end of the audio; an offset past the end or a negative, infinite or NaN
// value is an error.
TEST(DemoModel, OffsetAndDurationTranscribeAPart) {
    NEED_DEMO_MODEL();
    const std::string& dir = qasr_e2e::kDemo;
    std::vector<float> audio(8000, 0.0f);
    const auto en = qasr::load_audio_file(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    const auto de = qasr::load_audio_file(std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav");
    audio.insert(audio.end(), en.begin(), en.end());
    audio.insert(audio.end(), 16000, 0.0f);
    const size_t de_at = audio.size();
    audio.insert(audio.end(), de.begin(), de.end());
    audio.insert(audio.end(), 16000, 0.0f);
    qasr::Transcriber t = qasr::Transcriber::load(dir);
    const size_t b = de_at - 8000, n = de.size() + 16000; // the German clip with half a second either side
    const std::vector<float> part(audio.begin() + long(b), audio.begin() + long(b + n));
    for (double seg : {0.0, 2.5}) {
        qasr::TranscribeOptions o;
        o.segment_seconds = seg;
        const auto alone = t.transcribe(part, o);
        ASSERT_FALSE(alone.segments.empty());
        o.offset_seconds = double(b) / 16000;
        o.duration_seconds = double(n) / 16000;
        std::vector<qasr::Segment> live;
        o.on_segment = [&](const qasr::Segment& s) { live.push_back(s); };
        const auto r = t.transcribe(audio, o);
        EXPECT_EQ(r.text, alone.text) << seg;
        ASSERT_EQ(r.tokens.size(), alone.tokens.size());
        for (size_t i = 0; i < r.tokens.size(); ++i) EXPECT_EQ(r.tokens[i].id, alone.tokens[i].id);
        EXPECT_DOUBLE_EQ(r.audio_seconds, double(n) / 16000);
        ASSERT_EQ(r.segments.size(), alone.segments.size()) << seg;
        ASSERT_EQ(live.size(), r.segments.size());
        for (size_t i = 0; i < r.segments.size(); ++i) {
            EXPECT_NEAR(r.segments[i].start, alone.segments[i].start + o.offset_seconds, 1e-6);
            EXPECT_NEAR(r.segments[i].end, alone.segments[i].end + o.offset_seconds, 1e-6);
            EXPECT_EQ(r.segments[i].text, alone.segments[i].text);
            EXPECT_EQ(live[i].start, r.segments[i].start);
            EXPECT_EQ(live[i].end, r.segments[i].end);
        }
        EXPECT_GE(r.segments.front().start, double(de_at) / 16000 - 0.3); // the German clip's, not the file's start
    }
    qasr::TranscribeOptions o;
    o.offset_seconds = double(b) / 16000;
    o.duration_seconds = 1000; // past the end: to the end
    const auto tail = t.transcribe(audio, o);
    EXPECT_DOUBLE_EQ(tail.audio_seconds, double(audio.size() - b) / 16000);
    EXPECT_EQ(tail.text, t.transcribe(std::vector<float>(audio.begin() + long(b), audio.end())).text);
    for (const auto& [off, dur] : {std::pair{double(audio.size()) / 16000, 0.0}, std::pair{1e6, 1.0},
                                   std::pair{-1.0, 0.0}, std::pair{0.0, -2.0}, std::pair{std::nan(""), 0.0},
                                   std::pair{0.0, HUGE_VAL}}) {
        o.offset_seconds = off, o.duration_seconds = dur;
        EXPECT_THROW(t.transcribe(audio, o), qasr::Error) << off << " " << dur;
    }
}
