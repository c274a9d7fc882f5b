// Streaming sessions on a random-weight tiny model: finals independent of push block size, per-chunk work
// bounded independently of stream length (counted, not timed), empty streams, malformed pushes, and a short
// stream's final equal to the offline transcript; finish() runs the conv stem on new chunks only.
#include "core/error.hpp"
#include "model/random_checkpoint.hpp"
#include "pipeline/session.hpp"
#include "pipeline/stream.hpp"
#include "text/output.hpp"

#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const Model> tiny() {
    static std::shared_ptr<const Model> m = [] {
        const std::string d = testing::TempDir() + "/qasr_stream_tiny_" + std::to_string(::getpid());
        write_random_checkpoint(d, "tiny", "hf", 1, QASR_TOKENIZER_DIR);
        auto model = Model::load(d);
        fs::remove_all(d);
        return model;
    }();
    return m;
}

std::vector<float> speechlike(size_t n, uint32_t seed) { // amplitude-modulated noise, stable loudness
    std::mt19937 rng(seed);
    std::normal_distribution<float> g(0.0f, 0.1f);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = g(rng) * float(0.6 + 0.4 * std::sin(double(i) * 2e-4));
    return x;
}

std::vector<float> with_pauses(size_t n, uint32_t seed, size_t period = 16000 * 3, size_t quiet = 8000) {
    std::vector<float> x = speechlike(n, seed); // the last `quiet` samples of every period are silent
    for (size_t i = 0; i < n; ++i)
        if (i % period >= period - quiet) x[i] = 0.0f;
    return x;
}

#define NEED_TOKENIZER()                                                                                               \
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json"))                                             \
    GTEST_SKIP() << "tokenizer not set up: run scripts/setup_tokenizer.sh"

StreamOptions small_opts() {
    StreamOptions o;
    o.max_new_tokens_per_chunk = 6;
    o.itn = false;
    return o;
}

// Pushes the audio in blocks of `block` samples, collecting the text of every event polled after each push.
std::vector<std::string> push_in_blocks(StreamSession& s, const std::vector<float>& audio, size_t block) {
    std::vector<std::string> texts;
    for (size_t i = 0; i < audio.size(); i += block) {
        s.push(audio.data() + i, std::min(block, audio.size() - i));
        for (const auto& e : s.poll()) texts.push_back(e.text());
    }
    return texts;
}

} // namespace

TEST(Stream, FinalsDoNotDependOnBlockSize) {
    NEED_TOKENIZER();
    const auto audio = speechlike(16000 * 7 + 1234, 1);
    std::string first;
    std::vector<std::string> first_partials;
    for (size_t block : {size_t(1), size_t(160), size_t(1600), size_t(32000)}) {
        StreamSession s(tiny(), small_opts());
        const std::vector<std::string> partials = push_in_blocks(s, audio, block);
        const std::string fin = s.finish().raw_text;
        if (block == 1) {
            first = fin;
            first_partials = partials;
            EXPECT_EQ(partials.size(), 3u); // steps at 2, 4 and 6 s
        } else {
            EXPECT_EQ(fin, first) << "block " << block;
            EXPECT_EQ(partials, first_partials) << "block " << block;
        }
    }
}

TEST(Stream, PerChunkWorkIsBoundedIndependentlyOfLength) {
    NEED_TOKENIZER();
    StreamOptions o = small_opts();
    StreamSession s(tiny(), o);
    const auto audio = speechlike(16000 * 120, 2); // 2 minutes: 60 chunk steps, 5 segments
    s.push(audio.data(), audio.size());
    s.finish();
    const auto& st = s.stats();
    ASSERT_GE(st.size(), 60u);
    const int window_frames = 800, window_rows = 104;
    int max_frames = 0, max_prefill = 0, max_mel = 0;
    for (const auto& c : st) {
        max_frames = std::max(max_frames, c.encoder_frames);
        max_prefill = std::max(max_prefill, c.prefilled_tokens);
        max_mel = std::max(max_mel, c.mel_frames);
        EXPECT_LE(c.encoder_windows, 2 + o.max_segment_windows) << "at " << c.audio_seconds << " s";
    }
    // Steady state: one open window (+ one completed) of encoder input, and a prefill of the open window's rows,
    // the prompt suffix and a prefix of at most one segment's text.
    EXPECT_LE(max_frames, 2 * window_frames);
    EXPECT_LE(max_mel, 800 + 3); // a 2 s chunk (200 frames) plus the provisional tail; a segment's final ≤ 1 window
    const int seg_chunks = o.max_segment_windows * 4;
    EXPECT_LE(max_prefill, 2 * window_rows + 16 + seg_chunks * o.max_new_tokens_per_chunk);
    // and the late chunks cost no more than the early ones
    int early = 0, late = 0;
    for (size_t i = 0; i < 12; ++i) early = std::max(early, st[i].prefilled_tokens + st[i].encoder_frames);
    for (size_t i = st.size() - 12; i < st.size(); ++i) late = std::max(late, st[i].prefilled_tokens + st[i].encoder_frames);
    EXPECT_LE(late, early + 64);
}

TEST(Stream, EmptyAndTinyStreams) {
    NEED_TOKENIZER();
    StreamSession s(tiny(), small_opts());
    auto r = s.finish();
    EXPECT_EQ(r.text, "");
    EXPECT_EQ(r.finish, FinishReason::Empty);
    StreamSession t(tiny(), small_opts());
    std::vector<float> x(300, 0.1f);
    t.push(x.data(), x.size());
    EXPECT_EQ(t.finish().text, "");
}

TEST(Stream, MalformedPushesAreErrors) {
    NEED_TOKENIZER();
    StreamSession s(tiny(), small_opts());
    float bad[3] = {0.0f, NAN, 0.0f};
    EXPECT_THROW(s.push(bad, 3), Error);
    EXPECT_THROW(s.push(nullptr, 5), Error);
    const uint8_t odd[3] = {1, 2, 3};
    EXPECT_THROW(s.push_s16le(odd, 3), Error);
    s.finish();
    float ok[2] = {0, 0};
    EXPECT_THROW(s.push(ok, 2), Error);
    StreamOptions o = small_opts();
    o.chunk_seconds = 0;
    EXPECT_THROW(StreamSession(tiny(), o), Error);
}

// A stream's final result lists its segments (committed every max_segment_windows × 8 s at a pause): their texts
// make the final text, their times increase inside the audio and skip the quiet ends.
TEST(Stream, FinalListsTheStreamSegments) {
    NEED_TOKENIZER();
    StreamOptions o = small_opts();
    StreamSession s(tiny(), o);
    auto audio = with_pauses(16000 * 60, 7);
    audio.insert(audio.begin(), 16000, 0.0f); // 1 s of silence first
    s.push(audio.data(), audio.size());
    const auto fin = s.finish();
    ASSERT_GE(fin.segments.size(), 2u) << fin.raw_text; // 61 s: at least two 24 s segments
    std::string joined;
    double last_end = 0;
    for (const auto& seg : fin.segments) {
        joined += seg.text;
        EXPECT_GE(seg.start, last_end);
        EXPECT_LT(seg.start, seg.end);
        last_end = seg.end;
    }
    EXPECT_EQ(joined, fin.text);
    EXPECT_NEAR(fin.segments.front().start, 1.0, 0.011); // the leading silence is not speech
    EXPECT_LE(last_end, double(audio.size()) / 16000 + 1e-9);
    EXPECT_TRUE(fin.tokens.empty()); // without StreamOptions::logprobs
    StreamSession empty(tiny(), o);
    const auto none = empty.finish();
    EXPECT_TRUE(none.segments.empty());
    EXPECT_EQ(none.finish, FinishReason::Empty);
    // with logprobs: each segment's tokens, in order, decode to its text
    o.logprobs = true;
    StreamSession l(tiny(), o);
    l.push(audio.data(), audio.size());
    const auto fl = l.finish();
    EXPECT_EQ(fl.raw_text, fin.raw_text);
    ASSERT_EQ(fl.segments.size(), fin.segments.size());
    size_t next = 0;
    for (const auto& seg : fl.segments) {
        ASSERT_GE(seg.first_token, next);
        ASSERT_LE(seg.first_token + seg.n_tokens, fl.tokens.size());
        std::vector<int> ids;
        for (size_t k = seg.first_token; k < seg.first_token + seg.n_tokens; ++k) {
            ids.push_back(fl.tokens[k].id);
            EXPECT_LE(fl.tokens[k].logprob, 0.0f);
            EXPECT_TRUE(std::isfinite(fl.tokens[k].logprob));
        }
        EXPECT_EQ(parse_asr_output(tiny()->tokenizer.decode(ids), "").text, seg.text);
        next = seg.first_token + seg.n_tokens;
    }
}

TEST(Stream, ShortStreamFinalEqualsOffline) {
    NEED_TOKENIZER();
    // Under unfixed_chunks·chunk seconds the final decode runs without a text prefix, over exactly the audio the
    // offline path sees, so the result must be identical.
    const auto audio = speechlike(16000 * 3 + 777, 3);
    StreamOptions o = small_opts();
    StreamSession s(tiny(), o);
    s.push(audio.data(), audio.size());
    const auto fin = s.finish();
    Session off(tiny());
    TranscribeOptions to;
    to.itn = false;
    const auto r = off.run(audio, to);
    EXPECT_EQ(fin.raw_text, parse_asr_output(r.raw_text, "").text);
}

TEST(Stream, ConcurrentSessionsOnOneModel) {
    NEED_TOKENIZER();
    const std::vector<std::vector<float>> clips = {speechlike(16000 * 5, 11), speechlike(16000 * 6 + 99, 12)};
    auto run_one = [&](const std::vector<float>& a) {
        StreamSession s(tiny(), small_opts());
        for (size_t i = 0; i < a.size(); i += 4000) s.push(a.data() + i, std::min<size_t>(4000, a.size() - i));
        return s.finish().raw_text;
    };
    std::vector<std::string> sequential;
    for (const auto& c : clips) sequential.push_back(run_one(c));
    std::vector<std::string> parallel(clips.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < clips.size(); ++i) threads.emplace_back([&, i] { parallel[i] = run_one(clips[i]); });
    for (auto& t : threads) t.join();
    EXPECT_EQ(parallel, sequential);
}

TEST(Sampling, SeededAndGreedy) {
    NEED_TOKENIZER();
    const auto audio = speechlike(16000 * 2, 21);
    TranscribeOptions o;
    o.itn = false;
    o.decode.max_new_tokens = 12;
    o.decode.temperature = 1.5f;
    o.decode.seed = 7;
    Session a(tiny()), b(tiny());
    auto ra = a.run(audio, o), rb = b.run(audio, o);
    std::vector<int> ia, ib;
    for (auto& t : ra.tokens) ia.push_back(t.id);
    for (auto& t : rb.tokens) ib.push_back(t.id);
    EXPECT_EQ(ia, ib) << "same seed, same tokens";
    o.decode.seed = 8;
    auto rc = a.run(audio, o);
    std::vector<int> ic;
    for (auto& t : rc.tokens) ic.push_back(t.id);
    EXPECT_NE(ia, ic) << "another seed changes a 12-token sample at temperature 1.5";
    for (auto& t : ra.tokens) EXPECT_LE(t.logprob, 0.0f);
    o.decode.temperature = 0.0f;
    o.decode.ignore_eos = true;
    auto g = a.run(audio, o);
    EXPECT_EQ(g.tokens.size(), 12u);
    EXPECT_EQ(g.finish, FinishReason::TokenCap);
    o.decode.top_p = 0.0f;
    EXPECT_THROW(a.run(audio, o), Error);
}

TEST(Stream, FinalsDoNotDependOnBlockSizeInAnyMode) {
    NEED_TOKENIZER();
    // Pauses trigger extra steps; drafts, pause steps and the endpoint shortcut all happen at fixed sample counts.
    const auto audio = with_pauses(16000 * 9 + 321, 5);
    for (int mode = 0; mode < 4; ++mode) {
        std::string first;
        std::vector<std::string> first_partials;
        size_t first_steps = 0;
        for (size_t block : {size_t(1), size_t(160), size_t(1600), size_t(32000)}) {
            StreamOptions o = small_opts();
            o.pause_seconds = 0.3;
            o.speculative = mode != 1;
            o.exact_final = mode == 2;
            o.endpoint_final = mode == 3;
            StreamSession s(tiny(), o);
            const std::vector<std::string> partials = push_in_blocks(s, audio, block);
            const std::string fin = s.finish().raw_text;
            if (block == 1) {
                first = fin;
                first_partials = partials;
                first_steps = s.stats().size();
                int pauses = 0;
                for (const auto& st : s.stats()) pauses += st.pause;
                EXPECT_EQ(pauses, 3) << "pauses end at 3, 6 and 9 s; mode " << mode;
            } else {
                EXPECT_EQ(fin, first) << "block " << block << ", mode " << mode;
                EXPECT_EQ(partials, first_partials) << "block " << block << ", mode " << mode;
                EXPECT_EQ(s.stats().size(), first_steps) << "block " << block << ", mode " << mode;
            }
        }
    }
}

TEST(Stream, SpeculativeFinalEqualsOfflineTranscript) {
    NEED_TOKENIZER();
    // Chunk steps decode after a forced prefix; the final decodes without it, verifying the previous hypothesis as
    // a draft, so it is the greedy transcript of all the audio, as offline.
    for (uint32_t seed : {31u, 32u, 33u}) {
        const auto audio = speechlike(16000 * 7 + 555 * seed, seed);
        StreamOptions o = small_opts();
        o.unfixed_chunks = 1;
        StreamSession s(tiny(), o);
        s.push(audio.data(), audio.size());
        const auto fin = s.finish();
        int prefixed = 0;
        for (size_t i = 0; i + 1 < s.stats().size(); ++i) prefixed += s.stats()[i].draft_tokens > 0;
        EXPECT_GE(prefixed, 2) << "chunk steps verified drafts";
        Session off(tiny());
        TranscribeOptions to;
        to.itn = false;
        EXPECT_EQ(fin.raw_text, parse_asr_output(off.run(audio, to).raw_text, "").text) << "seed " << seed;
    }
}

TEST(Stream, FinalTokensLogprobsAndFinishAsOffline) {
    NEED_TOKENIZER();
    // With StreamOptions::logprobs the final lists the tokens offline lists (the generated ids and a closing EOS),
    // their log-probabilities and the language tag's probability; its finish reason is offline's with or without.
    // The drafts of the final (the previous hypothesis, lookup drafts) and its single steps all contribute tokens;
    // a cap of ⌈rate·s⌉+4 tokens (emulate_tokens_per_second) makes the decode end at the cap.
    std::set<FinishReason> seen;
    for (const double rate : {0.0, 0.5})
        for (uint32_t seed : {51u, 52u, 53u}) {
            const auto audio = speechlike(16000 * 7 + 333 * seed, seed);
            TranscribeOptions to;
            to.itn = false;
            if (rate > 0) to.decode.max_new_tokens = int(std::ceil(rate * double(audio.size()) / 16000.0)) + 4;
            const auto off = Session(tiny()).run(audio, to);
            for (const bool lp : {true, false}) {
                StreamOptions o = small_opts();
                o.unfixed_chunks = 1;
                o.logprobs = lp;
                o.emulate_tokens_per_second = rate;
                StreamSession s(tiny(), o);
                s.push(audio.data(), audio.size());
                const auto fin = s.finish();
                const std::string at = "seed " + std::to_string(seed) + " rate " + std::to_string(rate) + " logprobs " + std::to_string(lp);
                ASSERT_EQ(fin.raw_text, parse_asr_output(off.raw_text, "").text) << at;
                EXPECT_EQ(fin.finish, off.finish) << at;
                seen.insert(fin.finish);
                if (!lp) {
                    EXPECT_TRUE(fin.tokens.empty()) << at;
                    EXPECT_EQ(fin.language_probability, 0.0) << at;
                    continue;
                }
                ASSERT_EQ(fin.tokens.size(), off.tokens.size()) << at;
                for (size_t i = 0; i < off.tokens.size(); ++i) {
                    EXPECT_EQ(fin.tokens[i].id, off.tokens[i].id) << at << " token " << i;
                    EXPECT_NEAR(fin.tokens[i].logprob, off.tokens[i].logprob, 1e-4) << at << " token " << i;
                }
                EXPECT_NEAR(fin.language_probability, off.language_probability, 1e-4) << at;
                int drafted = 0;
                for (const auto& st : s.stats()) drafted += st.accepted_tokens + st.lookup_accepted;
                EXPECT_GT(drafted, 0) << at << ": tokens came from verified drafts";
                if (!fin.text.empty()) {
                    ASSERT_EQ(fin.segments.size(), 1u) << at;
                    EXPECT_EQ(fin.segments[0].first_token, 0u);
                    EXPECT_EQ(fin.segments[0].n_tokens, fin.tokens.size());
                }
            }
        }
    EXPECT_TRUE(seen.count(FinishReason::TokenCap)) << "a decode ended at its cap";
}

TEST(Stream, FinalTokensIncludeTheForcedPrefix) {
    NEED_TOKENIZER();
    // Without `speculative` the final continues after the rolled-back prefix of the last hypothesis: with logprobs
    // its tokens are that prefix (log-probabilities from the final's own pass) and then the generated ones, so
    // together they decode to the final's text.
    const auto audio = speechlike(16000 * 7 + 99, 61);
    StreamOptions o = small_opts();
    o.unfixed_chunks = 1;
    o.speculative = false;
    StreamSession plain(tiny(), o);
    plain.push(audio.data(), audio.size());
    const auto want = plain.finish();
    o.logprobs = true;
    StreamSession s(tiny(), o);
    s.push(audio.data(), audio.size());
    const auto fin = s.finish();
    EXPECT_EQ(fin.raw_text, want.raw_text);
    EXPECT_EQ(fin.finish, want.finish);
    std::vector<int> ids;
    for (const TokenInfo& t : fin.tokens) {
        if (!tiny()->is_eos(t.id)) ids.push_back(t.id);
        EXPECT_TRUE(std::isfinite(t.logprob) && t.logprob <= 0.0f) << t.logprob;
    }
    EXPECT_EQ(parse_asr_output(tiny()->tokenizer.decode(ids), "").text, fin.raw_text);
    const size_t generated = size_t(s.stats().back().generated_tokens) + (fin.finish == FinishReason::Eos);
    EXPECT_GT(fin.tokens.size(), generated) << "the final's forced prefix is listed too";
}

TEST(Stream, CompleteDraftNeedsNoSequentialDecodeAtFinish) {
    NEED_TOKENIZER();
    // 3 s of speech, then quiet: the pause step at 3.3 s decodes everything like the final would. A finish() right
    // there verifies that hypothesis in the prefill pass and runs no single-token decoder step.
    auto audio = speechlike(16000 * 3, 41);
    audio.resize(16000 * 3 + 4800, 0.0f);
    StreamOptions o = small_opts();
    o.pause_seconds = 0.3;
    StreamSession s(tiny(), o);
    std::vector<std::string> partials;
    s.push(audio.data(), audio.size());
    for (const auto& e : s.poll()) partials.push_back(e.text());
    ASSERT_FALSE(s.stats().empty());
    const StreamChunkStats pause = s.stats().back();
    ASSERT_TRUE(pause.pause);
    EXPECT_DOUBLE_EQ(pause.audio_seconds, 3.3);
    const auto fin = s.finish();
    const StreamChunkStats last = s.stats().back();
    EXPECT_FALSE(last.pause);
    EXPECT_EQ(last.draft_tokens, pause.generated_tokens);
    EXPECT_EQ(last.accepted_tokens, last.draft_tokens);
    EXPECT_EQ(last.decode_steps, 0);
    EXPECT_EQ(last.generated_tokens, pause.generated_tokens);
    ASSERT_FALSE(partials.empty());
    EXPECT_EQ(fin.raw_text, partials.back());
    // --exact-final decodes the same audio token by token and gets the same text
    StreamOptions e = o;
    e.exact_final = true;
    StreamSession x(tiny(), e);
    x.push(audio.data(), audio.size());
    EXPECT_EQ(x.finish().raw_text, fin.raw_text);
    EXPECT_EQ(x.stats().back().draft_tokens, 0);
    EXPECT_EQ(x.stats().back().decode_steps, x.stats().back().generated_tokens);
}

TEST(Stream, EndpointFinalSkipsTheQuietTail) {
    NEED_TOKENIZER();
    auto audio = speechlike(16000 * 3, 42);
    audio.resize(16000 * 4, 0.0f); // 1 s of silence: the pause step runs at 3.3 s
    StreamOptions o = small_opts();
    o.pause_seconds = 0.3;
    o.endpoint_final = true;
    StreamSession s(tiny(), o);
    s.push(audio.data(), audio.size());
    const size_t steps = s.stats().size();
    std::string pause_text;
    for (const auto& e : s.poll()) pause_text = e.text();
    const auto fin = s.finish();
    EXPECT_TRUE(s.endpoint_used());
    EXPECT_EQ(s.stats().size(), steps) << "no step at finish";
    EXPECT_EQ(fin.raw_text, s.stats().back().pause ? pause_text : fin.raw_text);
    // speech after the pause step invalidates the shortcut
    auto more = speechlike(16000, 43);
    StreamSession t(tiny(), o);
    t.push(audio.data(), audio.size());
    t.push(more.data(), more.size());
    t.finish();
    EXPECT_FALSE(t.endpoint_used());
    EXPECT_FALSE(t.stats().back().pause);
}

TEST(Stream, PauseStepsKeepPerChunkWorkBounded) {
    NEED_TOKENIZER();
    StreamOptions o = small_opts();
    o.pause_seconds = 0.3;
    StreamSession s(tiny(), o);
    const auto audio = with_pauses(16000 * 120, 6); // 2 minutes, a pause every 3 s
    s.push(audio.data(), audio.size());
    s.finish();
    int pauses = 0, max_frames = 0, max_prefill = 0;
    for (const auto& c : s.stats()) {
        pauses += c.pause;
        max_frames = std::max(max_frames, c.encoder_frames);
        max_prefill = std::max(max_prefill, c.prefilled_tokens);
        EXPECT_LE(c.encoder_windows, 2 + o.max_segment_windows) << "at " << c.audio_seconds << " s";
        EXPECT_LE(c.decode_steps, c.generated_tokens) << "at " << c.audio_seconds << " s";
        EXPECT_LE(c.accepted_tokens, c.draft_tokens);
    }
    EXPECT_EQ(pauses, 40);
    // Silence puts log-mel values under the clamp floor, so a completed window is re-encoded whenever the floor
    // moves (exactness, spec §4.6): at most the segment's windows plus the open one.
    EXPECT_LE(max_frames, (o.max_segment_windows + 1) * 800);
    // a full decode of at most one segment (24 s: ⌈24·20⌉+64 tokens) plus the open window's rows and the prompt
    EXPECT_LE(max_prefill, 2 * 104 + 16 + 480 + 64);
}

namespace {

// Final text of a streamed clip, with the conv-stem chunks computed by each step (the last one: finish()) and by
// push() between steps (before each step).
std::string stream_stem_chunks(const std::vector<float>& audio, std::vector<int>& chunks, int& final_frames,
                               std::vector<int>* early = nullptr, size_t block = 0) {
    StreamSession s(tiny(), small_opts());
    if (!block) block = audio.size();
    push_in_blocks(s, audio, block);
    const std::string fin = s.finish().raw_text;
    chunks.clear();
    if (early) early->clear();
    for (const auto& c : s.stats()) {
        chunks.push_back(c.stem_chunks);
        if (early) early->push_back(c.early_stem_chunks);
    }
    final_frames = s.stats().back().encoder_frames;
    return fin;
}

std::string offline_text(const std::vector<float>& audio) {
    Session off(tiny());
    TranscribeOptions to;
    to.itn = false;
    return parse_asr_output(off.run(audio, to).raw_text, "").text;
}

} // namespace

TEST(Stream, FinishRunsTheConvStemOnNewChunksOnly) {
    NEED_TOKENIZER();
    // 7.3 s whose loud first 0.2 s sets the clip maximum, so the clamp floor never moves. push() runs the conv stem
    // of each open-window chunk as soon as its 100 frames are final (chunk c at 160·(100c + 99) + 200 samples):
    // chunk 0 before the step at 2 s, 1–2 before 4 s, 3–4 before 6 s, 5–6 before finish(). Each step then computes
    // only the chunk holding its provisional last frames, and finish() only the 30-frame tail chunk, where
    // re-encoding the open window would run the stem on all 8. The Transformer still sees the whole window.
    auto audio = speechlike(16000 * 7 + 4800, 51);
    for (size_t i = 0; i < 3200; ++i) audio[i] *= 5.0f;
    std::vector<int> chunks, early;
    int frames = 0;
    const std::string fin = stream_stem_chunks(audio, chunks, frames, &early);
    EXPECT_EQ(chunks, (std::vector<int>{1, 1, 1, 1}));
    EXPECT_EQ(early, (std::vector<int>{1, 2, 2, 2}));
    EXPECT_EQ(frames, 730);
    EXPECT_EQ(fin, offline_text(audio));
    // The same counts for any split of the PCM into pushes (the chunk boundaries are fixed sample counts).
    std::vector<int> chunks2, early2;
    EXPECT_EQ(stream_stem_chunks(audio, chunks2, frames, &early2, 1234), fin);
    EXPECT_EQ(chunks2, chunks);
    EXPECT_EQ(early2, early);
    // A louder tail after the last step raises the clip maximum: the floor moves above values of the quiet second
    // chunk (kept since 4 s), which finish() must recompute besides the tail chunk, and the final still equals the
    // offline transcript. (Chunk 6, computed by push() after the loud frames arrived, already has the new floor.)
    for (size_t i = 16000; i < 24000; ++i) audio[i] *= 7e-4f;
    for (size_t i = 16000 * 7 - 3200; i < audio.size(); ++i) audio[i] *= 15.0f;
    const std::string loud = stream_stem_chunks(audio, chunks, frames);
    ASSERT_EQ(chunks.size(), 4u);
    EXPECT_GT(chunks.back(), 1);
    EXPECT_LE(chunks.back(), 8);
    EXPECT_EQ(loud, offline_text(audio));
}

TEST(Stream, LookupDraftsKeepTheGreedyTranscript) {
    NEED_TOKENIZER();
    // Where a step's hypothesis leaves the previous one, each sequential pass also verifies a prompt-lookup draft
    // (the random tiny model repeats tokens, so some are kept). Kept tokens must be exactly the greedy ones: the
    // final equals that of an exact_final session (token by token, no drafts) and the offline transcript.
    const auto audio = speechlike(16000 * 9 + 700, 77);
    StreamOptions o = small_opts();
    o.max_new_tokens_per_chunk = 24;
    StreamSession s(tiny(), o);
    s.push(audio.data(), audio.size());
    const auto fin = s.finish();
    int looked = 0, kept = 0;
    for (const auto& c : s.stats()) {
        looked += c.lookup_tokens;
        kept += c.lookup_accepted;
        EXPECT_LE(c.lookup_accepted, c.lookup_tokens);
        EXPECT_LE(c.decode_steps + c.accepted_tokens + c.lookup_accepted, c.generated_tokens);
    }
    EXPECT_GT(looked, 0);
    EXPECT_GT(kept, 0) << "the random tiny model repeats tokens: lookup drafts should be accepted";
    StreamOptions e = o;
    e.exact_final = true;
    StreamSession x(tiny(), e);
    x.push(audio.data(), audio.size());
    EXPECT_EQ(x.finish().raw_text, fin.raw_text);
    EXPECT_EQ(x.stats().back().lookup_tokens, 0);
    EXPECT_EQ(parse_asr_output(fin.raw_text, "").text, offline_text(audio));
}

TEST(Stream, InterruptStopsLaterStepsAndKeepsTheFinal) {
    NEED_TOKENIZER();
    // interrupt() from the partial event of the 4 s step (inside push): the steps at 6 and 8 s do not run, push()
    // still takes all the audio, and the final is the offline transcript, as without the interrupt.
    const auto audio = speechlike(16000 * 9 + 321, 51);
    const std::string want = offline_text(audio);
    StreamOptions o = small_opts();
    o.unfixed_chunks = 1;
    StreamSession* self = nullptr;
    int partials = 0;
    StreamSession s(tiny(), o, [&](const StreamEvent& e) {
        if (e.kind == StreamEvent::Kind::Partial && ++partials == 2) self->interrupt();
    });
    self = &s;
    push_in_blocks(s, audio, 1600);
    EXPECT_EQ(partials, 2);
    ASSERT_EQ(s.stats().size(), 2u); // the steps at 2 and 4 s
    const auto fin = s.finish();
    EXPECT_EQ(fin.raw_text, want);
    EXPECT_DOUBLE_EQ(fin.audio_seconds, double(audio.size()) / 16000.0);
    ASSERT_EQ(s.stats().size(), 3u);
    for (const auto& st : s.stats()) EXPECT_FALSE(st.interrupted);
    // the same with interrupt() before the first push: only the final runs
    StreamSession t(tiny(), o);
    t.interrupt();
    push_in_blocks(t, audio, 1600);
    EXPECT_TRUE(t.stats().empty());
    EXPECT_EQ(t.finish().raw_text, want);
    EXPECT_EQ(t.stats().size(), 1u);
}

TEST(Stream, InterruptFromAnotherThreadDuringPush) {
    NEED_TOKENIZER();
    // A key release while push() computes: another thread calls interrupt() after a varying delay. Wherever it
    // lands (between steps, after a step's encoder, between decode passes), the final is the offline transcript,
    // at most the step in progress stops early, and none runs after it.
    const auto audio = speechlike(16000 * 11, 52);
    const std::string want = offline_text(audio);
    StreamOptions o = small_opts();
    o.unfixed_chunks = 1;
    o.chunk_seconds = 1.0;
    o.max_new_tokens_per_chunk = 48; // long enough to be interrupted between decode passes too
    for (int delay_us : {0, 1000, 3000, 5000, 7000, 10000, 15000, 30000}) {
        StreamSession s(tiny(), o);
        std::thread release([&] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            s.interrupt();
        });
        s.push(audio.data(), audio.size());
        release.join();
        const size_t chunk_steps = s.stats().size();
        for (size_t i = 0; i < chunk_steps; ++i)
            if (s.stats()[i].interrupted) {
                EXPECT_EQ(i + 1, chunk_steps) << "a step ran after the interrupted one";
            }
        EXPECT_EQ(s.finish().raw_text, want) << "delay " << delay_us << " us";
        EXPECT_EQ(s.stats().size(), chunk_steps + 1);
        EXPECT_FALSE(s.stats().back().interrupted);
    }
}

TEST(Stream, InterruptAfterWindowsWereReencodedKeepsTheFinal) {
    NEED_TOKENIZER();
    // A louder stretch after the first 8-second window completed raises the clamp floor, so the step after it
    // re-encodes that window; an interrupt that stops the step after its encoder (or inside its prefill) must not
    // leave the decoder's cache rows of the old encoding to be reused by the final.
    auto audio = speechlike(16000 * 10 + 12800, 53);
    for (size_t i = 0; i < audio.size(); ++i) // quiet (−40 dB) but for 9.2 … 9.8 s
        if (i < 16000 * 9 + 3200 || i >= 16000 * 9 + 12800) audio[i] *= 0.01f;
    const std::string want = offline_text(audio);
    StreamOptions o = small_opts();
    o.unfixed_chunks = 1;
    o.chunk_seconds = 1.0;
    int reencoded = 0;
    const size_t quiet = 16000 * 9 + 1600; // steps at 1 … 9 s (the 9 s step completes window 0)
    // Without the 10 s step the final itself re-encodes window 0 and prefills from the audio on: every final after
    // a 10 s step stopped before its prefill completed must do the same.
    StreamSession r(tiny(), o);
    r.push(audio.data(), quiet);
    r.interrupt();
    r.push(audio.data() + quiet, audio.size() - quiet);
    EXPECT_EQ(r.finish().raw_text, want);
    const int full_prefill = r.stats().back().prefilled_tokens;
    for (int delay_us : {0, 500, 1000, 2000, 3000, 4000, 6000, 8000, 12000, 16000, 24000, 40000}) {
        StreamSession s(tiny(), o);
        s.push(audio.data(), quiet);
        std::thread release([&] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            s.interrupt();
        });
        // the step at 10 s sees all of the loud stretch and re-encodes window 0 (the final's floor is the same)
        s.push(audio.data() + quiet, audio.size() - quiet);
        release.join();
        const StreamChunkStats step = s.stats().back();
        const bool stale = step.interrupted && step.prefilled_tokens == 0 && step.audio_seconds > 9.5;
        reencoded += stale && step.encoder_windows > 1;
        EXPECT_EQ(s.finish().raw_text, want) << "delay " << delay_us << " us";
        if (stale) {
            EXPECT_EQ(s.stats().back().prefilled_tokens, full_prefill) << "delay " << delay_us << " us";
        }
    }
    std::printf("interrupted after re-encoding a window: %d of 12\n", reencoded);
}

TEST(Stream, InterruptedPauseStepIsNoEndpoint) {
    NEED_TOKENIZER();
    // With endpoint_final, finish() may return the last pause step's transcript, but not that of a pause step the
    // interrupt stopped (its hypothesis does not cover the audio): then the final decodes, as offline.
    auto audio = speechlike(16000 * 6, 44);
    audio.resize(16000 * 7, 0.0f); // the pause step runs at 6.3 s (chunk steps every 2 s before it)
    const std::string want = offline_text(audio);
    StreamOptions o = small_opts();
    o.pause_seconds = 0.3;
    o.endpoint_final = true;
    o.max_new_tokens_per_chunk = 48;
    int stopped = 0;
    for (int delay_us : {0, 1000, 2000, 4000, 8000, 16000}) {
        StreamSession s(tiny(), o);
        s.push(audio.data(), 16000 * 6 + 4700); // steps at 2, 4, 6 s; the pause step is due at 6.3 s
        std::thread release([&] {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
            s.interrupt();
        });
        s.push(audio.data() + 16000 * 6 + 4700, audio.size() - (16000 * 6 + 4700));
        release.join();
        const bool pause_stopped = !s.stats().empty() && s.stats().back().pause && s.stats().back().interrupted;
        stopped += pause_stopped;
        const auto fin = s.finish();
        if (pause_stopped) {
            EXPECT_FALSE(s.endpoint_used()) << "delay " << delay_us << " us";
            EXPECT_EQ(fin.raw_text, want) << "delay " << delay_us << " us";
        }
    }
    std::printf("pause steps stopped by the interrupt: %d of 6\n", stopped);
}

// trailing_quiet_seconds (hands-free dictation, `qasr stream --capture --auto-finish`): 0 during leading silence and
// speech, then the quiet after speech in 100 ms steps; speech again resets it; quiet relative to the loudest block
// (a block 20 dB under it is still speech, 40 dB under is quiet).
TEST(Stream, TrailingQuietCountsTheQuietAfterSpeech) {
    NEED_TOKENIZER();
    StreamOptions o = small_opts();
    o.chunk_seconds = 60; // no chunk steps: only the level tracking
    StreamSession s(tiny(), o);
    const std::vector<float> silence(16000, 0.0f), speech = speechlike(16000, 5);
    s.push(silence.data(), silence.size());
    EXPECT_EQ(s.trailing_quiet_seconds(), 0.0); // no speech yet
    s.push(speech.data(), speech.size());
    EXPECT_EQ(s.trailing_quiet_seconds(), 0.0);
    s.push(silence.data(), 8000);
    EXPECT_NEAR(s.trailing_quiet_seconds(), 0.5, 1e-9);
    std::vector<float> soft = speech, faint = speech;
    for (float& v : soft) v *= 0.1f;   // −20 dB: speech
    for (float& v : faint) v *= 0.01f; // −40 dB: quiet
    s.push(soft.data(), 4800);
    EXPECT_EQ(s.trailing_quiet_seconds(), 0.0);
    s.push(faint.data(), 16000);
    EXPECT_NEAR(s.trailing_quiet_seconds(), 1.0, 1e-9);
    s.push(silence.data(), 800); // half a block: not counted yet
    EXPECT_NEAR(s.trailing_quiet_seconds(), 1.0, 1e-9);
    s.push(silence.data(), 800);
    EXPECT_NEAR(s.trailing_quiet_seconds(), 1.1, 1e-9);
    s.finish();
}
