// End-to-end tests of `qasr stream`: raw PCM on standard input and a replayed file give the offline transcript;
// the microphone (`--capture`, through SDL's disk driver): a limit, Enter, push-to-talk, hands-free, Ctrl-C; partials
// on a narrow terminal fit its line.
#include "audio/audio.hpp"
#include "cli_util.hpp"
#include "text/utf8.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace qasr;
using namespace qasr_e2e;

TEST(Cli, StreamFromStdinAndRealtimeFileEqualOffline) {
    NEED_TOKENIZER();
    // `qasr stream` reads raw s16le from stdin on a reader thread (its end interrupts a step in progress) or
    // replays --file at real speed (the release at its end interrupts): either way one final, the offline text.
    CliRun off = run("transcribe -m " + tiny() + " --format json --no-itn -q " + kWav);
    ASSERT_EQ(off.status, 0) << off.err;
    const std::string want = nlohmann::json::parse(off.out)["text"];
    const std::string stream = "stream -m " + tiny() + " --json --no-itn --chunk-seconds 0.5";
    // stdin: the WAV's samples after its 44-byte header (the tool's output files are per-process, see run())
    for (const std::string& args : {stream + " < <(tail -c +45 " + kWav + ")", stream + " --realtime --file " + kWav}) {
        const CliRun r = shell(std::string(QASR_BIN) + " " + args);
        EXPECT_EQ(r.status, 0) << args << ": " << r.err;
        int finals = 0;
        std::string text;
        std::istringstream in(r.out);
        for (std::string line; std::getline(in, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j["type"] == "final") ++finals, text = j["stable"].get<std::string>();
        }
        EXPECT_EQ(finals, 1) << args << ": " << r.out;
        EXPECT_EQ(text, want) << args;
    }
    // --logprobs: a closing "result" line as `transcribe --format json` prints one, with the offline tokens
    const CliRun r = shell(std::string(QASR_BIN) + " " + stream + " --logprobs --file " + kWav);
    ASSERT_EQ(r.status, 0) << r.err;
    std::string last;
    std::istringstream in(r.out);
    for (std::string line; std::getline(in, line);) last = line;
    const auto res = nlohmann::json::parse(last), o = nlohmann::json::parse(off.out);
    EXPECT_EQ(res["type"], "result");
    EXPECT_EQ(res["text"], want);
    EXPECT_EQ(res["finish_reason"], o["finish_reason"]);
    ASSERT_EQ(res["tokens"].size(), o["tokens"].size()) << last;
    for (size_t i = 0; i < o["tokens"].size(); ++i) {
        EXPECT_EQ(res["tokens"][i]["id"], o["tokens"][i]["id"]) << i;
        EXPECT_NEAR(res["tokens"][i]["logprob"].get<double>(), o["tokens"][i]["logprob"].get<double>(), 1e-4) << i;
    }
}

// `qasr stream --capture` (SDL2 builds) through SDL's "disk" audio driver, which captures from a raw file at real
// speed (then silence): the demo model hears the bundled English sample as from a microphone.
// - a --capture-seconds limit: one final, the sample's transcript, the same as the offline transcript of the audio
//   it saved (--save-audio), which begins with the sample's samples;
// - Enter on standard input ends the utterance; with --ptt each pair of Enters is one utterance (its own saved file
//   and final, again equal to the offline transcript of that file);
// - SIGINT finishes the utterance gracefully (exit 0, one final); bad combinations and devices are one-line errors.
TEST(Cli, StreamCaptureFromAMicrophone) {
    NEED_DEMO_MODEL();
    const std::string& demo = kDemo;
    CliRun ver = run("version");
    ASSERT_EQ(ver.status, 0);
    const bool capture = ver.out.find("microphone capture (qasr stream --capture, SDL2) yes") != std::string::npos;
#ifdef QASR_EXPECT_CAPTURE_MODULE // built with SDL2: the CLI must find its microphone module (no silent skip)
    ASSERT_TRUE(capture) << ver.out;
#endif
    if (!capture) GTEST_SKIP() << "built without SDL2 (microphone capture): install libsdl2-dev";
    const std::string dir = scratch() + "/capture";
    fs::create_directories(dir);
    const std::string sample = sample_wav("demo_en"), want = sample_text("demo_en");
    const std::vector<float> x = load_audio_file(sample);
    auto write_raw = [](const std::string& path, const std::vector<float>& y) { // what the disk driver captures
        std::ofstream raw(path, std::ios::binary);
        const std::string w = wav16_bytes(y.data(), y.size());
        raw.write(w.data() + 44, std::streamsize(w.size() - 44)); // s16le without the WAV header
    };
    write_raw(dir + "/in.raw", x);
    const std::string env = "SDL_AUDIODRIVER=disk SDL_DISKAUDIOFILEIN=" + dir + "/in.raw ";
    const std::string stream = env + QASR_BIN + " stream -m " + demo + " --json";
    auto finals = [](const std::string& out) {
        std::vector<std::string> f;
        std::istringstream in(out);
        for (std::string line; std::getline(in, line);) {
            const auto j = nlohmann::json::parse(line);
            if (j["type"] == "final") f.push_back(j["stable"].get<std::string>());
        }
        return f;
    };
    auto offline = [&](const std::string& wav) {
        CliRun r = run("transcribe -m " + demo + " -q " + wav);
        EXPECT_EQ(r.status, 0) << r.err;
        return r.out.empty() ? r.out : r.out.substr(0, r.out.size() - 1);
    };

    // the limit: the whole sample, then silence
    CliRun a = shell(stream + " --logprobs --capture --capture-seconds 4 --save-audio " + dir + "/a.wav < /dev/null");
    ASSERT_EQ(a.status, 0) << a.err;
    EXPECT_NE(a.err.find("listening on \"default\" (disk)"), std::string::npos) << a.err;
    const std::vector<std::string> fa = finals(a.out);
    ASSERT_EQ(fa.size(), 1u) << a.out;
    EXPECT_EQ(fa[0], want);
    { // --logprobs: the utterance's closing result line
        std::string last;
        std::istringstream in(a.out);
        for (std::string line; std::getline(in, line);) last = line;
        const auto res = nlohmann::json::parse(last);
        EXPECT_EQ(res["type"], "result");
        EXPECT_EQ(res["text"], want);
        EXPECT_EQ(res["finish_reason"], "eos");
        EXPECT_GT(res["tokens"].size(), 2u);
        EXPECT_GT(res["language_probability"].get<double>(), 0.5);
    }
    EXPECT_EQ(fa[0], offline(dir + "/a.wav"));
    const std::vector<float> saved = load_audio_file(dir + "/a.wav");
    ASSERT_EQ(saved.size(), 64000u);
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(saved[i], x[i]) << i;

    // the keys are pressed once the capture runs (its line on stderr): loading takes long under sanitizers
    const std::string ready = "for i in $(seq 1200); do grep -q \"listening on\\|push to talk\" " + scratch() +
                              "/e2e_err && break; sleep 0.05; done; "; // at most a minute
    // Enter ends it
    CliRun e = shell("(" + ready + "sleep 1.5; echo) | " + stream + " --capture --save-audio " + dir + "/e.wav");
    ASSERT_EQ(e.status, 0) << e.err;
    const std::vector<std::string> fe = finals(e.out);
    ASSERT_EQ(fe.size(), 1u) << e.out;
    const std::vector<float> se = load_audio_file(dir + "/e.wav");
    EXPECT_GT(se.size(), 4000u);
    EXPECT_LT(se.size(), 64000u); // well before the end of the sample on an idle machine; bounded loosely
    EXPECT_EQ(fe[0], offline(dir + "/e.wav"));

    // push to talk: two utterances (the second in the silence after the sample), then the end of input quits
    CliRun p = shell("(" + ready + "sleep 0.3; echo; sleep 1.5; echo; sleep 0.3; echo; sleep 0.8; echo; sleep 0.3) | " + stream +
                  " --capture --ptt --save-audio " + dir + "/p.wav");
    ASSERT_EQ(p.status, 0) << p.err;
    const std::vector<std::string> fp = finals(p.out);
    ASSERT_EQ(fp.size(), 2u) << p.out << p.err;
    EXPECT_EQ(fp[0], offline(dir + "/p-1.wav"));
    EXPECT_EQ(fp[1], offline(dir + "/p-2.wav"));
    EXPECT_GT(load_audio_file(dir + "/p-1.wav").size(), 4000u);

    // hands-free (--auto-finish): the sample, a second of silence, the German sample → two utterances, each ended by
    // the quiet after it, each final the offline transcript of its saved audio; the silent third one (ended by
    // Enter) prints no final
    {
        const std::vector<float> y = load_audio_file(sample_wav("demo_de"));
        std::vector<float> both = x;
        both.insert(both.end(), 16000, 0.0f);
        both.insert(both.end(), y.begin(), y.end());
        write_raw(dir + "/in2.raw", both);
    }
    const std::string env2 = "SDL_AUDIODRIVER=disk SDL_DISKAUDIOFILEIN=" + dir + "/in2.raw ";
    CliRun h = shell("(" + ready + "sleep 9.5; echo) | " + env2 + QASR_BIN + " stream -m " + demo +
                  " --json --capture --auto-finish 0.6 --save-audio " + dir + "/h.wav");
    ASSERT_EQ(h.status, 0) << h.err;
    const std::vector<std::string> fh = finals(h.out);
    ASSERT_EQ(fh.size(), 2u) << h.out;
    EXPECT_EQ(fh[0], want);
    EXPECT_EQ(fh[0], offline(dir + "/h-1.wav"));
    EXPECT_EQ(fh[1], offline(dir + "/h-2.wav"));
    EXPECT_LT(load_audio_file(dir + "/h-1.wav").size(), x.size() + 16000u); // ended inside the pause

    // Ctrl-C: the utterance is finished, not lost (also when the signal comes twice at once, as `timeout` sends it)
    CliRun c = shell(stream + " --capture < /dev/null & pid=$!; " + ready + "sleep 1; kill -INT $pid; wait $pid");
    EXPECT_EQ(c.status, 0) << c.err;
    EXPECT_EQ(finals(c.out).size(), 1u) << c.out;
    CliRun c2 = shell(env + "timeout --preserve-status -s INT 8 " + QASR_BIN + " stream -m " + demo + " --json --capture < /dev/null");
    EXPECT_EQ(c2.status, 0) << c2.err;
    EXPECT_EQ(finals(c2.out).size(), 1u) << c2.out;

    for (const std::string& bad : {std::string(" --ptt"), std::string(" --capture-seconds 2"), std::string(" --auto-finish 1"),
                                   std::string(" --capture --ptt --auto-finish 1"),
                                   " --capture --file " + sample, std::string(" --capture-device \"no such mic\"")}) {
        CliRun r = shell(stream + bad + " < /dev/null");
        EXPECT_NE(r.status, 0) << bad;
        std::string err;
        std::istringstream in(r.err);
        for (std::string line; std::getline(in, line);)
            if (line.rfind("qasr:", 0) == 0) err += line + "\n";
        EXPECT_EQ(lines(err), 1) << bad << ": " << r.err;
        EXPECT_NE(err.find("error"), std::string::npos) << bad << ": " << r.err;
    }
}

// `qasr stream` on a terminal 30 columns wide (a pty from script(1)): each partial rewritten in place fits the line
// (its end after "…"), and the final is printed whole on its own line.
TEST(Cli, StreamPartialsFitTheTerminalLine) {
    NEED_DEMO_MODEL();
    const std::string& demo = kDemo;
    if (std::system("command -v script >/dev/null 2>&1") != 0) GTEST_SKIP() << "script(1) not installed";
    const std::string wav = std::string(QASR_SOURCE_DIR) + "/tests/data/demo_testset/test-de-000001.wav";
    CliRun off = run("transcribe -q -m " + demo + " " + wav);
    ASSERT_EQ(off.status, 0) << off.err;
    ASSERT_GT(off.out.size(), 31u) << "a transcript longer than the line is needed: " << off.out;
    const std::string out = scratch() + "/tty.out";
    const std::string cmd = "script -qec \"stty cols 30; " + std::string(QASR_BIN) + " stream -m " + demo +
                            " --file " + wav + " --chunk-seconds 0.3\" /dev/null > " + out + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream f(out);
    std::string s((std::istreambuf_iterator<char>(f)), {});
    s = std::regex_replace(s, std::regex("\x1b\\[[0-9;]*[A-Za-z]"), "");
    std::vector<std::string> shown; // what each \r (a rewrite) or line break leaves on a line
    std::string cur;
    for (char c : s) {
        if (c == '\r' || c == '\n') {
            if (!cur.empty()) shown.push_back(cur);
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) shown.push_back(cur);
    ASSERT_FALSE(shown.empty());
    int partials = 0;
    for (const std::string& l : shown) {
        if (l + "\n" == off.out) continue; // the final
        ++partials;
        EXPECT_LE(utf8::decode(utf8::sanitize(l)).size(), 29u) << l;
    }
    EXPECT_GT(partials, 0) << s;
    EXPECT_NE(std::find_if(shown.begin(), shown.end(), [&](const std::string& l) { return l + "\n" == off.out; }),
              shown.end()) << s;
}
