// Streaming sessions on a random-weight tiny model: finals independent of push block size, per-chunk work
// bounded independently of stream length (counted, not timed), empty streams, malformed pushes, and a short
// stream's final equal to the offline transcript.
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

#define NEED_TOKENIZER()                                                                                               \
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json"))                                             \
    GTEST_SKIP() << "tokenizer not set up: run scripts/setup_tokenizer.sh"

StreamOptions small_opts() {
    StreamOptions o;
    o.max_new_tokens_per_chunk = 6;
    o.itn = false;
    return o;
}

} // namespace

TEST(Stream, FinalsDoNotDependOnBlockSize) {
    NEED_TOKENIZER();
    const auto audio = speechlike(16000 * 7 + 1234, 1);
    std::string first;
    std::vector<std::string> first_partials;
    for (size_t block : {size_t(1), size_t(160), size_t(1600), size_t(32000)}) {
        StreamSession s(tiny(), small_opts());
        std::vector<std::string> partials;
        for (size_t i = 0; i < audio.size(); i += block) {
            s.push(audio.data() + i, std::min(block, audio.size() - i));
            for (const auto& e : s.poll()) partials.push_back(e.text());
        }
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
