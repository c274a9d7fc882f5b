// Audio input and front-end tests: WAV variants, hostile WAV bytes, resampling, mel constants (spec §3).
#include "audio/audio.hpp"
#include "audio/mel.hpp"
#include "core/error.hpp"
#include "model/encoder.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <functional>
#include <limits>

#include <cmath>
#include <cstdlib>
#include <unistd.h>
#include <iterator>
#include <fstream>
#include <cstdio>
#include <cstring>
#include <random>

using namespace qasr;

namespace {

std::vector<uint8_t> make_wav(uint16_t format, uint16_t channels, uint32_t rate, uint16_t bits,
                              const std::vector<uint8_t>& pcm, bool extensible = false) {
    std::vector<uint8_t> w;
    auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) w.push_back(uint8_t(v >> (8 * i))); };
    auto u16 = [&](uint16_t v) { w.push_back(uint8_t(v)); w.push_back(uint8_t(v >> 8)); };
    const uint32_t fmt_len = extensible ? 40 : 16;
    w.insert(w.end(), {'R', 'I', 'F', 'F'});
    u32(uint32_t(4 + 8 + fmt_len + 8 + pcm.size()));
    w.insert(w.end(), {'W', 'A', 'V', 'E', 'f', 'm', 't', ' '});
    u32(fmt_len);
    u16(extensible ? 0xFFFE : format);
    u16(channels);
    u32(rate);
    u32(rate * channels * bits / 8);
    u16(uint16_t(channels * bits / 8));
    u16(bits);
    if (extensible) {
        u16(22);
        u16(bits);
        u32(0);
        u16(format);
        for (int i = 0; i < 14; ++i) w.push_back(0);
    }
    w.insert(w.end(), {'d', 'a', 't', 'a'});
    u32(uint32_t(pcm.size()));
    w.insert(w.end(), pcm.begin(), pcm.end());
    return w;
}

} // namespace

TEST(Wav, Pcm16StereoAveragesChannels) {
    std::vector<uint8_t> pcm;
    for (int16_t l : {16384, -32768}) {
        for (int16_t v : {l, int16_t(0)}) {
            pcm.push_back(uint8_t(v & 0xff));
            pcm.push_back(uint8_t((v >> 8) & 0xff));
        }
    }
    auto w = make_wav(1, 2, 16000, 16, pcm);
    DecodedAudio a = parse_wav(w.data(), w.size(), "t");
    ASSERT_EQ(a.samples.size(), 2u);
    EXPECT_FLOAT_EQ(a.samples[0], 0.25f);
    EXPECT_FLOAT_EQ(a.samples[1], -0.5f);
}

// The writer (`qasr stream --save-audio`) is the 16-bit reader's inverse: every 16-bit value comes back as itself;
// out-of-range samples clip, NaN is written as silence.
TEST(Wav, SixteenBitWriterRoundTrips) {
    std::vector<float> x;
    for (int v = -32768; v <= 32767; v += 97) x.push_back(float(v) / 32768.0f);
    x.push_back(32767.0f / 32768.0f);
    const size_t exact = x.size();
    x.insert(x.end(), {1.5f, -3.0f, std::nanf("")});
    const std::string w = wav16_bytes(x.data(), x.size());
    ASSERT_EQ(w.size(), 44 + 2 * x.size());
    const DecodedAudio a = parse_wav(reinterpret_cast<const uint8_t*>(w.data()), w.size(), "t");
    EXPECT_EQ(a.sample_rate, 16000);
    EXPECT_EQ(a.channels, 1);
    ASSERT_EQ(a.samples.size(), x.size());
    for (size_t i = 0; i < exact; ++i) ASSERT_EQ(a.samples[i], x[i]) << i;
    EXPECT_EQ(a.samples[exact], 32767.0f / 32768.0f);
    EXPECT_EQ(a.samples[exact + 1], -1.0f);
    EXPECT_EQ(a.samples[exact + 2], 0.0f);
    EXPECT_EQ(wav16_bytes(nullptr, 0).size(), 44u);
}

// `qasr transcribe -` tells a file on stdin from raw PCM by its first bytes
TEST(Wav, AudioFileHeadersAreRecognized) {
    auto bytes = [](std::string s) {
        s.resize(std::max<size_t>(s.size(), 16), '\0');
        return std::vector<uint8_t>(s.begin(), s.end());
    };
    using namespace std::string_literals; // "..."s: the zero bytes stay
    for (const std::string& h : {"RIFF\x24\0\0\0WAVEfmt "s, "fLaC"s, "OggS"s, "ID3\x04"s, "\x1a\x45\xdf\xa3"s,
                                 "\0\0\0\x20"s + "ftypM4A "s, "FORM\0\0\0\0AIFF"s}) {
        const auto b = bytes(h);
        EXPECT_TRUE(looks_like_audio_file(b.data(), b.size())) << h;
    }
    std::vector<uint8_t> pcm(3200);
    for (size_t i = 0; i < pcm.size(); ++i) pcm[i] = uint8_t(i * 37 % 251);
    EXPECT_FALSE(looks_like_audio_file(pcm.data(), pcm.size()));
    const auto riff_only = bytes("RIFF"); // RIFF without WAVE: not WAV, not another format either
    EXPECT_FALSE(looks_like_audio_file(riff_only.data(), riff_only.size()));
    EXPECT_FALSE(looks_like_audio_file(pcm.data(), 3));
}

TEST(Wav, AllSampleFormats) {
    struct Case { uint16_t fmt, bits; std::vector<uint8_t> bytes; float want; bool ext; };
    float f = 0.5f;
    double d = -0.25;
    std::vector<uint8_t> fb(4), db(8);
    std::memcpy(fb.data(), &f, 4);
    std::memcpy(db.data(), &d, 8);
    const Case cases[] = {{1, 8, {192}, 0.5f, false},
                          {1, 24, {0x00, 0x00, 0x40}, 0.5f, false},
                          {1, 32, {0, 0, 0, 0xC0}, -0.5f, true},
                          {3, 32, fb, 0.5f, false},
                          {3, 64, db, -0.25f, true}};
    for (const auto& c : cases) {
        auto w = make_wav(c.fmt, 1, 8000, c.bits, c.bytes, c.ext);
        DecodedAudio a = parse_wav(w.data(), w.size(), "t");
        ASSERT_EQ(a.samples.size(), 1u) << c.bits;
        EXPECT_FLOAT_EQ(a.samples[0], c.want) << c.bits;
        EXPECT_EQ(a.sample_rate, 8000);
    }
}

// A float WAV holding NaN or infinity is malformed: a clear error naming the sample (NaN used to become 0 and one
// infinite sample silence everywhere, through the peak normalization).
TEST(AudioBytes, NonFiniteFloatSamplesAreErrors) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
        std::vector<float> x(1000, 0.25f);
        x[700] = bad;
        std::vector<uint8_t> bytes(x.size() * 4);
        std::memcpy(bytes.data(), x.data(), bytes.size());
        const auto w = make_wav(3, 1, 16000, 32, bytes);
        try {
            load_audio_bytes(w.data(), w.size(), "f.wav");
            ADD_FAILURE() << "accepted " << bad;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("f.wav: sample 700 is"), std::string::npos) << e.what();
            EXPECT_EQ(std::string(e.what()).rfind("[audio]", 0), 0u) << e.what();
        }
    }
    std::vector<float> x(1000, 0.25f);
    std::vector<uint8_t> bytes(x.size() * 4);
    std::memcpy(bytes.data(), x.data(), bytes.size());
    const auto w = make_wav(3, 1, 16000, 32, bytes);
    EXPECT_EQ(load_audio_bytes(w.data(), w.size(), "f.wav").size(), 1000u);
}

TEST(Wav, HostileBytesAreErrorsNotCrashes) {
    auto good = make_wav(1, 1, 16000, 16, std::vector<uint8_t>(200, 1));
    EXPECT_THROW(parse_wav(good.data(), 11, "t"), Error);
    auto bad_bits = make_wav(1, 1, 16000, 12, {1, 2});
    EXPECT_THROW(parse_wav(bad_bits.data(), bad_bits.size(), "t"), Error);
    auto zero_ch = make_wav(1, 0, 16000, 16, {1, 2});
    EXPECT_THROW(parse_wav(zero_ch.data(), zero_ch.size(), "t"), Error);
    auto mulaw = make_wav(7, 1, 8000, 8, {1, 2});
    EXPECT_THROW(parse_wav(mulaw.data(), mulaw.size(), "t"), Error);
    std::mt19937 rng(3);
    for (int trial = 0; trial < 3000; ++trial) { // random corruption of a valid header
        auto w = good;
        for (int k = 0; k < 4; ++k) w[12 + rng() % 36] = uint8_t(rng());
        w.resize(size_t(rng() % w.size()) + 1);
        try {
            DecodedAudio a = parse_wav(w.data(), w.size(), "t");
            EXPECT_LE(a.samples.size(), w.size());
        } catch (const Error&) {
        }
    }
}

TEST(AudioBytes, LengthLimitAndHostileBytes) { // the upload path of `qasr serve`
    const auto two_s = make_wav(1, 1, 16000, 16, std::vector<uint8_t>(64000, 0));
    EXPECT_EQ(load_audio_bytes(two_s.data(), two_s.size(), "t").size(), 32000u);
    EXPECT_EQ(load_audio_bytes(two_s.data(), two_s.size(), "t", 2.5).size(), 32000u);
    try {
        load_audio_bytes(two_s.data(), two_s.size(), "clip.wav", 1.5);
        ADD_FAILURE() << "2 s of audio passed a 1.5 s limit";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("clip.wav: longer than the limit of 1.5 s"), std::string::npos) << e.what();
    }
    EXPECT_THROW(load_audio_bytes(two_s.data(), 0, "t"), Error);
    std::mt19937 rng(5); // random bytes: WAV parser or FFmpeg from memory, an error or audio, never a crash
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<uint8_t> b(size_t(rng() % 2000) + 1);
        for (auto& x : b) x = uint8_t(rng());
        if (trial % 4 == 0) std::memcpy(b.data(), "ID3\x03", std::min<size_t>(4, b.size()));   // mp3-like
        if (trial % 4 == 1) std::memcpy(b.data(), "OggS", std::min<size_t>(4, b.size()));      // ogg-like
        if (trial % 4 == 2) std::memcpy(b.data(), "fLaC", std::min<size_t>(4, b.size()));      // flac-like
        try {
            load_audio_bytes(b.data(), b.size(), "t", 60);
        } catch (const Error&) {
        }
    }
}

// FFmpeg's decoding is a module loaded on the first compressed file (audio/ffmpeg_plugin.cpp): in a build with FFmpeg
// it must be found from the build tree, so that the tests of compressed audio run instead of skipping (the CLI's
// own search and the error without a module: Cli.FfmpegModuleIsFoundOrNamedInTheError).
TEST(AudioBytes, FfmpegModuleLoadsWhereTheBuildHasIt) {
#ifdef QASR_EXPECT_FFMPEG_MODULE
    ASSERT_TRUE(ffmpeg_available()) << "built with FFmpeg, but its module did not load";
    EXPECT_NE(ffmpeg_module_path().find("libqasr_ffmpeg.so"), std::string::npos) << ffmpeg_module_path();
#else
    EXPECT_FALSE(ffmpeg_available());
    EXPECT_EQ(ffmpeg_module_path(), "");
#endif
}

// A stream whose frames change format and channel layout midway (tests/data/audio/README.md: a fuzzer's find that
// crashed libswresample): decoded with the conversion set up again per change, or refused with an Error — and a
// second decode in the same process is unaffected.
TEST(AudioBytes, StreamChangingItsFormatMidwayIsDecodedOrRefused) {
    if (!ffmpeg_available()) GTEST_SKIP() << "built without FFmpeg";
    std::ifstream in(std::string(QASR_SOURCE_DIR) + "/tests/data/audio/fuzz_flac_format_change.bin", std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(b.size(), 7545u);
    for (int round = 0; round < 2; ++round) {
        try {
            const std::vector<float> a = load_audio_bytes(b.data(), b.size(), "fuzz.bin", 60);
            for (float v : a) ASSERT_TRUE(v >= -1.0f && v <= 1.0f);
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("fuzz.bin"), std::string::npos) << e.what();
        }
    }
}

TEST(AudioBytes, CompressedLengthLimitHoldsWhileDecoding) { // a small FLAC of 25 s against a 20 s limit
    if (!ffmpeg_available()) GTEST_SKIP() << "built without FFmpeg";
    if (std::system("command -v sox >/dev/null 2>&1") != 0) GTEST_SKIP() << "sox not installed";
    const std::string f = testing::TempDir() + "/qasr_limit_" + std::to_string(::getpid()) + ".flac";
    ASSERT_EQ(std::system(("sox -n -r 16000 -c 1 -b 16 " + f + " synth 25 sine 440 vol 0.1").c_str()), 0);
    std::ifstream in(f, std::ios::binary);
    const std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::remove(f.c_str());
    ASSERT_GT(b.size(), 100u);
    EXPECT_EQ(load_audio_bytes(b.data(), b.size(), "t.flac", 30).size(), 25u * 16000u);
    try {
        load_audio_bytes(b.data(), b.size(), "t.flac", 20);
        ADD_FAILURE() << "25 s of FLAC passed a 20 s limit";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("t.flac: longer than the limit of 20 s"), std::string::npos) << e.what();
    }
}

TEST(Resample, PreservesToneAndLength) {
    std::vector<float> x(44100);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * std::sin(2 * M_PI * 440.0 * double(i) / 44100.0);
    auto y = resample(x, 44100, 16000);
    EXPECT_NEAR(double(y.size()), 16000.0, 2.0);
    double e = 0;
    for (size_t i = 2000; i < 14000; ++i) {
        const double want = 0.5 * std::sin(2 * M_PI * 440.0 * double(i) / 16000.0);
        e = std::max(e, std::fabs(y[i] - want));
    }
    EXPECT_LT(e, 1e-3);
}

TEST(Mel, FilterbankCheckValues) {
    MelFrontend m(128);
    Tensor fb = m.filterbank_matrix(); // [201, 128]
    EXPECT_NEAR(fb.data[1 * 128 + 0], 0.0123740, 1e-7);
    EXPECT_NEAR(fb.data[1 * 128 + 1], 0.0303926, 1e-7);
    EXPECT_EQ(fb.data[1 * 128 + 2], 0.0f);
    EXPECT_NEAR(mel_to_hz_slaney(hz_to_mel_slaney(8000.0)), 8000.0, 1e-9);
    EXPECT_NEAR(hz_to_mel_slaney(8000.0), 45.245640, 1e-6);
}

TEST(Mel, FrameCountAndNormalization) {
    MelFrontend m(128);
    std::vector<float> x(16159);
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0, 0.1f);
    for (size_t i = 8000; i < x.size(); ++i) x[i] = n(rng); // first half digital silence
    Tensor mel = m.compute(x, 8000);
    EXPECT_EQ(mel.dim(0), 128);
    EXPECT_EQ(mel.dim(1), 100);
    float mx = -1e9f, mn = 1e9f;
    for (float v : mel.data) mx = std::max(mx, v), mn = std::min(mn, v);
    EXPECT_NEAR(mx - mn, 2.0f, 1e-5f) << "clip-max − 8 clamp spans exactly 8/4 = 2 in normalized units";
    Tensor shortm = m.compute(std::vector<float>(3000, 0.01f), 8000); // padded to 0.5 s
    EXPECT_EQ(shortm.dim(1), 50);
    EXPECT_THROW(m.compute(std::vector<float>(150, 0.0f), 0), Error);
}

// Long audio: the frames run in blocks of 20 s on the OpenMP team, with cancellation asked between blocks; the
// log-mel is bit for bit the whole clip's frames in one pass, on one thread or several.
TEST(Mel, BlocksAndThreadsGiveTheSameFrames) {
    MelFrontend m(128);
    std::vector<float> x(16000 * 25 + 123); // two blocks (also run under qemu: kept short)
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0, 0.1f);
    for (float& v : x) v = n(rng);
    const size_t T = MelFrontend::n_frames(x.size());
    std::vector<float> one_pass = m.log10_frames(x, x.size(), 0, T);
    const float mx = *std::max_element(one_pass.begin(), one_pass.end());
    const Tensor want = MelFrontend::normalize(one_pass, 128, T, mx);
    const Tensor got = m.compute(x, 8000);
    ASSERT_EQ(got.shape, want.shape);
    EXPECT_EQ(got.data, want.data);
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    const Tensor single = m.compute(x, 8000);
    omp_set_num_threads(before);
    EXPECT_EQ(single.data, want.data);
    int asked = 0;
    double told = -1;
    const PassHook count = [&](double done) { return told = done, ++asked, false; };
    EXPECT_EQ(m.compute(x, 8000, &count).data, want.data);
    EXPECT_EQ(asked, 1); // after the first 20 s of the 25 s
    EXPECT_NEAR(told, 2000.0 / double(T), 1e-12); // the fraction of the frames done
    const PassHook stop = [](double) { return true; };
    EXPECT_EQ(m.compute(x, 8000, &stop).size(), 0u);
    // a stream's recomputed tail: any [t0, t1) equals those columns of the whole
    const std::vector<float> tail = m.log10_frames(x, x.size(), T - 70, T);
    for (int b = 0; b < 128; ++b)
        for (size_t t = 0; t < 70; ++t) ASSERT_EQ(tail[size_t(b) * 70 + t], one_pass[size_t(b) * T + T - 70 + t]);
}

TEST(Mel, SilenceIsFlat) {
    MelFrontend m(128);
    Tensor mel = m.compute(std::vector<float>(32000, 0.0f), 8000);
    for (float v : mel.data) ASSERT_FLOAT_EQ(v, (-10.0f + 4.0f) / 4.0f);
}

TEST(Encoder, AudioTokenCountTable) {
    AudioHParams hp;
    hp.n_window = 50;
    const std::pair<int64_t, int64_t> table[] = {{400, 1},       {8000, 7},      {16000, 13},      {16159, 13},
                                                 {48000, 39},    {160000, 130},  {480000, 390},    {19200000, 15600}};
    for (auto [n, a] : table) EXPECT_EQ(audio_token_count(n / 160, hp), a) << n;
}

TEST(Encoder, SinusoidCheckValues) {
    Tensor p = sinusoid_table(13, 896);
    EXPECT_NEAR(p.data[1 * 896 + 0], 0.84147098, 1e-6);
    EXPECT_NEAR(p.data[1 * 896 + 448], 0.54030231, 1e-6);
    EXPECT_NEAR(p.data[0 * 896 + 448 + 5], 1.0, 1e-7);
}
