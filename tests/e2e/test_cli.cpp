// End-to-end tests of the qasr binary: a random-weight tiny checkpoint transcribes; bad model directories,
// missing/mis-shaped tensors, truncated safetensors, non-audio and empty files and bad options each give one
// clear error line and a non-zero exit status; `qasr dev logits` gives consistent argmaxes, margins and top logits.
#include "audio/audio.hpp"
#include "core/dtype.hpp"
#include "io/safetensors.hpp"
#include "model/random_checkpoint.hpp"
#include "text/utf8.hpp"
#include "cli_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <array>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace qasr;
using namespace qasr_e2e;

namespace {

// A copy of the tiny checkpoint whose tensors are edited by `edit` (return false to drop a tensor).
std::string broken_copy(const std::string& name, const std::function<bool(TensorToWrite&)>& edit) {
    const std::string d = scratch() + "/" + name;
    fs::remove_all(d);
    fs::create_directories(d);
    for (auto& f : fs::directory_iterator(tiny()))
        if (f.path().filename() != "model.safetensors") fs::copy_file(f.path(), d + "/" + f.path().filename().string());
    TensorStore st = TensorStore::open_dir(tiny());
    std::vector<TensorToWrite> out;
    for (const auto& [n, t] : st.tensors()) {
        TensorToWrite w{n, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
        if (edit(w)) out.push_back(std::move(w));
    }
    write_safetensors(d + "/model.safetensors", out);
    return d;
}

} // namespace

TEST(Cli, TranscribesWithTinyModel) {
    NEED_TOKENIZER();
    CliRun r = run("transcribe -m " + tiny() + " --format json --max-new-tokens 8 " + kWav);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("\"tokens\""), std::string::npos) << r.out;
    EXPECT_NE(r.err.find("RTF"), std::string::npos);
    CliRun ig = run("transcribe -m " + tiny() + " --format json --ignore-eos --max-new-tokens 12 -q " + kWav);
    EXPECT_EQ(ig.status, 0) << ig.err;
    auto j = nlohmann::json::parse(ig.out);
    EXPECT_EQ(j["tokens"].size(), 12u);
    EXPECT_EQ(j["finish_reason"], "token_cap");
    // the warm-up pass (default with several inputs, forced with --warmup) leaves the transcript unchanged
    CliRun w = run("transcribe -m " + tiny() + " --format json --ignore-eos --max-new-tokens 12 -q --warmup " + kWav);
    EXPECT_EQ(w.status, 0) << w.err;
    EXPECT_EQ(nlohmann::json::parse(w.out)["tokens"], j["tokens"]);
}

// 16-bit mono 16 kHz WAV of `x`
void write_wav16(const std::string& path, const std::vector<float>& x) {
    std::ofstream(path, std::ios::binary) << wav16_bytes(x.data(), x.size());
}

// Subtitles from the demo model: the two bundled samples with a 1.5 s pause between them give two cues at the
// samples' times whose texts are the samples' transcripts; srt/vtt/timestamped text/json agree; --output-dir
// writes one file per input; bad combinations fail with one line.
TEST(Cli, SubtitlesOfTwoSamples) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    std::vector<float> x;
    std::vector<double> bounds;
    for (const char* name : {"demo_en", "demo_de"}) {
        const auto a = load_audio_file(std::string(QASR_SOURCE_DIR) + "/samples/" + name + ".wav");
        bounds.push_back(double(x.size()) / 16000);
        x.insert(x.end(), a.begin(), a.end());
        bounds.push_back(double(x.size()) / 16000);
        x.insert(x.end(), 24000, 0.0f);
    }
    const std::string wav = scratch() + "/two.wav";
    write_wav16(wav, x);
    CliRun srt = run("transcribe -m " + demo + " --format srt --segment-seconds 5 -q " + wav);
    ASSERT_EQ(srt.status, 0) << srt.err;
    // 1\nHH:MM:SS,mmm --> HH:MM:SS,mmm\ntext\n\n2\n...
    std::istringstream in(srt.out);
    std::string line;
    std::vector<std::string> texts;
    for (int cue = 1; std::getline(in, line); ++cue) {
        ASSERT_EQ(line, std::to_string(cue)) << srt.out;
        ASSERT_TRUE(std::getline(in, line));
        int h0, m0, s0, ms0, h1, m1, s1, ms1;
        ASSERT_EQ(std::sscanf(line.c_str(), "%d:%d:%d,%d --> %d:%d:%d,%d", &h0, &m0, &s0, &ms0, &h1, &m1, &s1, &ms1), 8)
            << line;
        const double a = h0 * 3600 + m0 * 60 + s0 + ms0 / 1000.0, b = h1 * 3600 + m1 * 60 + s1 + ms1 / 1000.0;
        ASSERT_LE(size_t(cue), bounds.size() / 2) << srt.out;
        EXPECT_GE(a, bounds[2 * cue - 2] - 1e-9) << line; // inside the sample
        EXPECT_LT(a, b) << line;
        EXPECT_LE(b, bounds[2 * cue - 1] + 1e-9) << line;
        ASSERT_TRUE(std::getline(in, line));
        texts.push_back(line);
        if (std::getline(in, line)) {
            ASSERT_EQ(line, "") << srt.out;
        }
    }
    ASSERT_EQ(texts.size(), 2u) << srt.out;
    for (int i = 0; i < 2; ++i) {
        std::ifstream want(std::string(QASR_SOURCE_DIR) + (i ? "/samples/demo_de.txt" : "/samples/demo_en.txt"));
        std::string w;
        std::getline(want, w);
        EXPECT_EQ(texts[size_t(i)], w);
    }
    CliRun vtt = run("transcribe -m " + demo + " --format vtt --segment-seconds 5 -q " + wav);
    ASSERT_EQ(vtt.status, 0) << vtt.err;
    EXPECT_EQ(vtt.out.rfind("WEBVTT\n\n", 0), 0u) << vtt.out;
    EXPECT_NE(vtt.out.find(texts[0]), std::string::npos) << vtt.out;
    CliRun txt = run("transcribe -m " + demo + " --segment-seconds 5 -q " + wav);
    ASSERT_EQ(txt.status, 0) << txt.err;
    EXPECT_EQ(lines(txt.out), 2) << txt.out;
    EXPECT_NE(txt.out.find("]  " + texts[1] + "\n"), std::string::npos) << txt.out;
    CliRun js = run("transcribe -m " + demo + " --segment-seconds 5 --format json -q " + wav);
    ASSERT_EQ(js.status, 0) << js.err;
    const auto j = nlohmann::json::parse(js.out);
    ASSERT_EQ(j["segments"].size(), 2u);
    EXPECT_EQ(j["segments"][1]["text"], texts[1]);
    EXPECT_EQ(j["text"], texts[0] + " " + texts[1]);
    { // each token's text: a piece's tokens but its end token spell its model output (raw_text: the pieces')
        std::string spelled;
        for (const auto& seg : j["segments"]) {
            const size_t b = seg["first_token"], n = seg["n_tokens"];
            ASSERT_GE(n, 2u);
            for (size_t k = b; k + 1 < b + n; ++k) spelled += j["tokens"][k]["text"].get<std::string>();
            EXPECT_EQ(j["tokens"][b + n - 1]["text"], "<|im_end|>");
        }
        EXPECT_EQ(spelled, j["raw_text"].get<std::string>());
    }
    // several inputs: --output-dir, one file each (a repeated name gets -2)
    const std::string od = scratch() + "/subs";
    fs::create_directories(od);
    CliRun two = run("transcribe -m " + demo + " --format srt -q -o " + od + " " + wav + " " + wav);
    ASSERT_EQ(two.status, 0) << two.err;
    EXPECT_EQ(two.out, "");
    std::ifstream f1(od + "/two.srt"), f2(od + "/two-2.srt");
    const std::string s1((std::istreambuf_iterator<char>(f1)), std::istreambuf_iterator<char>());
    const std::string s2((std::istreambuf_iterator<char>(f2)), std::istreambuf_iterator<char>());
    EXPECT_NE(s1.find(texts[1]), std::string::npos) << s1; // 10 s segments by default: one or two cues
    EXPECT_EQ(s1, s2);
    // standard output gets the cues as their pieces finish; the file written at the end is the same text
    CliRun one = run("transcribe -m " + demo + " --format srt --segment-seconds 5 -q -o " + od + " " + wav);
    ASSERT_EQ(one.status, 0) << one.err;
    std::ifstream f3(od + "/two.srt");
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(f3)), std::istreambuf_iterator<char>()), srt.out);
    CliRun vtt_file = run("transcribe -m " + demo + " --format vtt --segment-seconds 5 -q -o " + od + " " + wav);
    ASSERT_EQ(vtt_file.status, 0) << vtt_file.err;
    std::ifstream f4(od + "/two.vtt");
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(f4)), std::istreambuf_iterator<char>()), vtt.out);
    // whisper.cpp's short options: -l auto (detect), -t N
    CliRun shortopts = run("transcribe -m " + demo + " --segment-seconds 5 -q -l auto -t 1 " + wav);
    ASSERT_EQ(shortopts.status, 0) << shortopts.err;
    EXPECT_EQ(shortopts.out, txt.out);
    // several formats from one transcription: each file what that format alone prints; tsv has the srt's times
    const std::string mf = od + "/multi";
    fs::create_directories(mf);
    CliRun multi = run("transcribe -m " + demo + " --format txt,srt,vtt,json,tsv,lrc,srt --segment-seconds 5 -q -o " + mf + " " + wav);
    ASSERT_EQ(multi.status, 0) << multi.err;
    EXPECT_EQ(multi.out, "");
    EXPECT_EQ(slurp(mf + "/two.srt"), srt.out);
    EXPECT_EQ(slurp(mf + "/two.vtt"), vtt.out);
    EXPECT_EQ(slurp(mf + "/two.txt"), txt.out);
    const auto mj = nlohmann::json::parse(slurp(mf + "/two.json"));
    EXPECT_EQ(mj["segments"], j["segments"]);
    EXPECT_EQ(mj["text"], j["text"]);
    EXPECT_EQ(std::distance(fs::directory_iterator(mf), fs::directory_iterator()), 6);
    std::string tsv_want = "start\tend\ttext\n";
    for (const auto& seg : j["segments"])
        tsv_want += std::to_string(std::llround(seg["start"].get<double>() * 1000)) + "\t" +
                    std::to_string(std::llround(seg["end"].get<double>() * 1000)) + "\t" + seg["text"].get<std::string>() + "\n";
    EXPECT_EQ(slurp(mf + "/two.tsv"), tsv_want);
    CliRun tsv = run("transcribe -m " + demo + " --format tsv --segment-seconds 5 -q " + wav);
    ASSERT_EQ(tsv.status, 0) << tsv.err;
    EXPECT_EQ(tsv.out, tsv_want);
    // LRC lyrics: [mm:ss.xx] (centiseconds) and the segment's text
    std::string lrc_want = "[re:qasr]\n";
    for (const auto& seg : j["segments"]) {
        const long long cs = std::llround(seg["start"].get<double>() * 100);
        char t[32];
        std::snprintf(t, sizeof t, "[%02lld:%02lld.%02lld]", cs / 6000, cs / 100 % 60, cs % 100);
        lrc_want += t + seg["text"].get<std::string>() + "\n";
    }
    EXPECT_EQ(slurp(mf + "/two.lrc"), lrc_want);
    EXPECT_EQ(run("transcribe -m " + demo + " --format lrc --segment-seconds 5 -q " + wav).out, lrc_want);
    // --offset in the pause before the second sample (HH:MM:SS form): its cue alone, at its time in the file
    const double off = bounds[2] - 0.5;
    char hms[32];
    std::snprintf(hms, sizeof hms, "00:00:%06.3f", off);
    CliRun part = run("transcribe -m " + demo + " --format json --segment-seconds 5 -q --offset " + hms + " " + wav);
    ASSERT_EQ(part.status, 0) << part.err;
    const auto pj = nlohmann::json::parse(part.out);
    ASSERT_EQ(pj["segments"].size(), 1u) << part.out;
    EXPECT_EQ(pj["segments"][0]["text"], texts[1]);
    EXPECT_NEAR(pj["segments"][0]["start"].get<double>(), bounds[2], 0.3);
    EXPECT_NEAR(pj["audio_seconds"].get<double>(), double(x.size()) / 16000 - off, 1e-3);
    CliRun dur = run("transcribe -m " + demo + " --format json -q --duration 1:00 " + wav); // to the end
    ASSERT_EQ(dur.status, 0) << dur.err;
    EXPECT_NEAR(nlohmann::json::parse(dur.out)["audio_seconds"].get<double>(), double(x.size()) / 16000, 1e-3);
    for (const std::string& args : {"--format srt " + wav + " " + wav, "--segment-seconds 1 " + wav,
                                   "--segment-seconds 5000 " + wav, "--format srt -o " + od + "/nope " + wav,
                                   "--offset 1:75 " + wav, "--offset -3 " + wav, "--offset 1e3 " + wav,
                                   "--duration 0 " + wav, "--offset 1:00 " + wav, "--format txt,srt " + wav,
                                   "--format txt,xml -o " + od + " " + wav, "--format , -o " + od + " " + wav}) {
        CliRun r = run("transcribe -m " + demo + " " + args);
        EXPECT_NE(r.status, 0) << args;
        EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
    }
}

// --batch N with several inputs: N files at once (their decode steps batched), outputs in input order and equal to
// one at a time; a missing file in the middle stops the run with one error line after the outputs before it.
TEST(Cli, SeveralInputsAtOnceKeepTheirOrder) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string en = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    const std::string de = std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav";
    const std::string t = std::string(QASR_SOURCE_DIR) + "/tests/data/demo_testset/test-en-000001.wav";
    const std::string inputs = en + " " + de + " " + t + " " + de + " " + en;
    CliRun one = run("transcribe -m " + demo + " -q " + inputs);
    ASSERT_EQ(one.status, 0) << one.err;
    EXPECT_EQ(lines(one.out), 5);
    CliRun three = run("transcribe -m " + demo + " -q --batch 3 " + inputs);
    ASSERT_EQ(three.status, 0) << three.err;
    EXPECT_EQ(three.out, one.out);
    CliRun bad = run("transcribe -m " + demo + " -q --batch 3 " + en + " /nonexistent.wav " + de);
    EXPECT_NE(bad.status, 0);
    EXPECT_EQ(lines(bad.err), 1) << bad.err;
    EXPECT_EQ(bad.out, one.out.substr(0, one.out.find('\n') + 1)); // the first file's line only
    EXPECT_NE(run("transcribe -m " + demo + " --batch 0 " + en).status, 0);
    // without -q: a line per input, then the whole run's (inputs overlap, so their own RTFs do not add up)
    CliRun loud = run("transcribe -m " + demo + " --batch 3 " + en + " " + de);
    ASSERT_EQ(loud.status, 0) << loud.err;
    EXPECT_NE(loud.err.find("qasr: 2 inputs, 7.38 s of audio in "), std::string::npos) << loud.err;
    EXPECT_NE(loud.err.find("real time, batch 3)"), std::string::npos) << loud.err;
}

// A file name that is not UTF-8 (Linux allows any bytes): the JSON names it with U+FFFD and keeps the transcript
// (nlohmann's dump() threw on it: rc 1, "[json.exception.type_error.316]", no output).
TEST(Cli, JsonOfAFileWhoseNameIsNotUtf8) {
    NEED_DEMO_MODEL();
    const std::string odd = scratch() + "/clip\xff\xfe.wav";
    std::filesystem::copy_file(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav", odd,
                               std::filesystem::copy_options::overwrite_existing);
    CliRun r = run("transcribe -m " + qasr_e2e::kDemo + " -q --format json \"" + odd + "\"");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["file"], scratch() + "/clip\xef\xbf\xbd\xef\xbf\xbd.wav");
    CliRun plain = run("transcribe -m " + qasr_e2e::kDemo + " -q " + std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    EXPECT_EQ(j["text"].get<std::string>() + "\n", plain.out);
}

TEST(Cli, DetectLanguagePrintsTheLanguageAndItsProbability) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string en = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    const std::string de = std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav";
    CliRun r = run("transcribe -m " + demo + " -q --detect-language " + en + " " + de);
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_EQ(lines(r.out), 2) << r.out;
    EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(English \(p = [01]\.\d{3}\)\nGerman \(p = [01]\.\d{3}\)\n)")))
        << r.out;
    CliRun j = run("transcribe -m " + demo + " -q --detect-language --format json " + en);
    ASSERT_EQ(j.status, 0) << j.err;
    const auto js = nlohmann::json::parse(j.out);
    EXPECT_EQ(js["language"], "English");
    EXPECT_EQ(js["text"], "");
    EXPECT_GT(js["language_probability"].get<double>(), 0.5);
    for (const char* bad : {" --language en", " --segment-seconds 5", " --format srt"}) {
        CliRun b = run("transcribe -m " + demo + " --detect-language" + std::string(bad) + " " + en);
        EXPECT_EQ(b.status, 2) << bad;
        EXPECT_EQ(lines(b.err), 1) << b.err;
    }
}

TEST(Cli, BeamSizeSearchesBeamsAndRefusesSampling) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string en = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    CliRun r = run("transcribe -m " + demo + " -q --beam-size 3 --batch 2 " + en + " " + en); // through a batch engine
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, "The concert on Tuesday starts at 8:30.\nThe concert on Tuesday starts at 8:30.\n");
    CliRun j = run("transcribe -m " + demo + " -q -bs 2 --length-penalty 0.5 --format json " + en);
    ASSERT_EQ(j.status, 0) << j.err;
    EXPECT_EQ(nlohmann::json::parse(j.out)["text"], "The concert on Tuesday starts at 8:30.");
    CliRun b = run("bench -m " + demo + " --audio " + en + " --beam-size 2 --runs 1 --warmup 0 --bw-mb 0 --json");
    ASSERT_EQ(b.status, 0) << b.err;
    EXPECT_EQ(nlohmann::json::parse(b.out)["beam_size"], 2);
    for (const char* bad : {" --beam-size 2 --temperature 0.5", " --beam-size 0", " --beam-size 17",
                            " --beam-size 2 --detect-language", " --length-penalty nan"}) {
        CliRun e = run("transcribe -m " + demo + std::string(bad) + " " + en);
        EXPECT_NE(e.status, 0) << bad;
        EXPECT_EQ(lines(e.err), 1) << bad << ": " << e.err;
    }
}

// --live: the text on stderr as the model writes it, a line per input; standard output as without it.
TEST(Cli, LiveShowsTheTextAsItIsWritten) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string en = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    const std::string de = std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav";
    CliRun r = run("transcribe -m " + demo + " -q --live " + en + " " + de);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string want = "The concert on Tuesday starts at 8:30.\nDas Treffen ist am 11. Mai um 7:55 Uhr.\n";
    EXPECT_EQ(r.out, want);
    EXPECT_EQ(r.err, want);
    CliRun e = run("transcribe -m " + demo + " --live --batch 2 " + en + " " + de);
    EXPECT_NE(e.status, 0);
    EXPECT_NE(e.err.find("--live"), std::string::npos) << e.err;
    // with -pc the live text is colored too: each delta in the shade of its least likely token, the same text
    CliRun c = run("transcribe -m " + demo + " -q --live -pc " + en + " " + de);
    ASSERT_EQ(c.status, 0) << c.err;
    const std::regex code("\x1b\\[38;5;(\\d+)m([^\x1b]*)\x1b\\[0m");
    EXPECT_EQ(std::regex_replace(c.err, code, "$2"), want);
    std::set<int> shades;
    size_t pieces = 0;
    for (std::sregex_iterator it(c.err.begin(), c.err.end(), code), end; it != end; ++it, ++pieces)
        shades.insert(std::stoi((*it)[1]));
    EXPECT_GE(pieces, 10u) << "a colored piece per delta";
    for (const int s : shades) EXPECT_TRUE(s == 40 || s == 148 || s == 220 || s == 208 || s == 160) << s;
    EXPECT_EQ(std::regex_replace(c.out, code, "$2"), want); // standard output: -pc's colored transcripts
}

// -pp / --print-progress: per input, "progress N %" lines on stderr in steps of 5 from 0 to 100, growing; standard
// output as without it; side by side with --batch; not with --live.
TEST(Cli, PrintProgressCountsToOneHundredPerInput) {
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string en = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    const std::string de = std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav";
    const std::string want = "The concert on Tuesday starts at 8:30.\nDas Treffen ist am 11. Mai um 7:55 Uhr.\n";
    for (const std::string batch : {"", " --batch 2"}) {
        SCOPED_TRACE(batch);
        CliRun r = run("transcribe -m " + demo + " -q -pp" + batch + " " + en + " " + de);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.out, want);
        for (const std::string& f : {en, de}) {
            std::vector<int> pct;
            std::istringstream lines(r.err);
            const std::string head = "qasr: " + f + ": progress ";
            for (std::string l; std::getline(lines, l);)
                if (l.rfind(head, 0) == 0) pct.push_back(std::stoi(l.substr(head.size())));
            ASSERT_GE(pct.size(), 4u) << r.err;
            EXPECT_EQ(pct.front(), 0);
            EXPECT_EQ(pct.back(), 100);
            for (size_t i = 1; i < pct.size(); ++i) {
                EXPECT_GT(pct[i], pct[i - 1]);
                EXPECT_EQ(pct[i] % 5, 0);
            }
        }
    }
    CliRun e = run("transcribe -m " + demo + " --live --print-progress " + en);
    EXPECT_NE(e.status, 0);
    EXPECT_NE(e.err.find("--print-progress"), std::string::npos) << e.err;
}

TEST(Cli, VersionNamesTheBuildAndMachine) {
    for (const char* arg : {"version", "--version"}) {
        CliRun r = run(arg);
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_EQ(r.out.rfind("qasr 0.", 0), 0u) << r.out;
        for (const char* want : {"\nbuild: CUDA backend ", ", FFmpeg decoding ", "\ncpu: ", " threads, kernels ",
                                 "bf16 products ", ", float32 products ", "HTTP server (qasr serve) "})
            EXPECT_NE(r.out.find(want), std::string::npos) << want << " in " << r.out;
    }
    // the float32 products' engine: the AVX2 table's own kernel, unless QASR_PACKED_GEMM=0 takes it away
    CliRun a = system_run(std::string("QASR_ISA=avx2 ") + QASR_BIN + " version");
    if (a.status == 0 && a.out.find("kernels avx2") != std::string::npos) {
        EXPECT_NE(a.out.find(", float32 products avx2"), std::string::npos) << a.out;
        CliRun b = system_run(std::string("QASR_ISA=avx2 QASR_PACKED_GEMM=0 ") + QASR_BIN + " version");
        ASSERT_EQ(b.status, 0) << b.err;
        EXPECT_TRUE(b.out.find(", float32 products sgemm") != std::string::npos ||
                    b.out.find(", float32 products portable") != std::string::npos) << b.out;
    }
    // OpenBLAS's kernel family; a family the user chose stays chosen (the command re-runs itself with another only
    // where OpenBLAS does not know the CPU and OPENBLAS_CORETYPE is not set: backend/cpu/blas_core.hpp)
    CliRun v = run("version");
    if (v.out.find("OpenBLAS yes") == std::string::npos) GTEST_SKIP() << "a build without OpenBLAS";
    EXPECT_NE(v.out.find("OpenBLAS yes ("), std::string::npos) << v.out;
    EXPECT_NE(v.out.find(" kernels"), std::string::npos) << v.out;
    CliRun p = system_run(std::string("OPENBLAS_CORETYPE=Prescott ") + QASR_BIN + " version");
    ASSERT_EQ(p.status, 0) << p.err;
    EXPECT_NE(p.out.find("OpenBLAS yes (Prescott kernels, OPENBLAS_CORETYPE=Prescott)"), std::string::npos) << p.out;
}

// `qasr bench --clients N`: concurrent requests on one model (a server's load) give the one-client tokens, and the
// report counts every request of every round (the first round apart).
TEST(Cli, BenchClientsRunsConcurrentRequestsAlike) {
    NEED_TOKENIZER();
    CliRun r = run("bench -m " + tiny() + " --audio " + kWav + " --ignore-eos --max-new-tokens 6 --runs 2 --warmup 0 "
                   "--bw-mb 0 --clients 3 --json");
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.contains("clients")) << r.out;
    const auto& c = j["clients"];
    EXPECT_EQ(c["n"], 3);
    EXPECT_EQ(c["requests"], 9); // (2 rounds + the first) × 3
    EXPECT_EQ(c["requests_with_one_clients_tokens"], 9);
    EXPECT_GT(c["throughput_x_realtime"].get<double>(), 0.0);
    EXPECT_GE(c["request_ms_max"].get<double>(), c["request_ms_median"].get<double>());
    EXPECT_NE(run("bench -m " + tiny() + " --clients 0").status, 0);
}

// `qasr dev logits` (what scripts/cuda_reference.py compares with transformers): per prompt position the argmax,
// the top-2 margin, the top 4 logits and the argmax of the logits rounded to bf16 (lowest id among equal values).
TEST(Cli, DevLogitsGivesArgmaxMarginsTopAndBf16Argmax) {
    NEED_TOKENIZER();
    CliRun r = run("dev logits -m " + tiny() + " --steps 3 " + kWav);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const size_t L = j["prompt_ids"].size();
    ASSERT_GT(L, 10u);
    ASSERT_EQ(j["prefill_argmax"].size(), L);
    ASSERT_EQ(j["prefill_margin"].size(), L);
    ASSERT_EQ(j["prefill_argmax_bf16"].size(), L);
    ASSERT_EQ(j["prefill_top"].size(), L);
    EXPECT_EQ(j["forced_ids"].size(), 3u);
    const auto b16 = [](double v) { return bf16_to_f32(f32_to_bf16(float(v))); };
    int checked = 0;
    for (size_t i = 0; i < L; ++i) {
        const auto& top = j["prefill_top"][i];
        ASSERT_EQ(top.size(), 4u);
        for (size_t k = 1; k < 4; ++k) EXPECT_GE(top[k - 1][1].get<double>(), top[k][1].get<double>());
        EXPECT_EQ(top[0][0], j["prefill_argmax"][i]);
        EXPECT_NEAR(j["prefill_margin"][i].get<double>(), top[0][1].get<double>() - top[1][1].get<double>(), 1e-6);
        // the bf16 argmax: the lowest id among the top entries that round to the largest bf16 value (decidable
        // when the 4th entry rounds below it)
        const float best = b16(top[0][1].get<double>());
        if (b16(top[3][1].get<double>()) == best) continue;
        int64_t want = -1;
        for (const auto& e : top)
            if (b16(e[1].get<double>()) == best && (want < 0 || e[0].get<int64_t>() < want)) want = e[0].get<int64_t>();
        EXPECT_EQ(j["prefill_argmax_bf16"][i].get<int64_t>(), want) << "position " << i;
        ++checked;
    }
    EXPECT_GT(checked, int(L) / 2);
}

const std::string& tiny_aligner() {
    static std::string dir = [] {
        const std::string d = scratch() + "/tiny-aligner";
        if (!fs::exists(d + "/model.safetensors"))
            write_random_checkpoint(d, "aligner-tiny", "original", 1, QASR_TOKENIZER_DIR);
        return d;
    }();
    return dir;
}

// Forced alignment with a random-weight aligner: every word of the text gets a time (the values are the random
// model's; tests/parity/aligner_parity.cpp compares them with transformers), in every output format; a transcript's
// words come from its segments; misuse fails with one line.
TEST(Cli, AlignTimesEveryWordOfTheText) {
    NEED_TOKENIZER();
    const std::string text = "\"Hello, world! It's 你好.\"";
    CliRun r = run("align -m " + tiny_aligner() + " --format json -q --text " + text + " " + kWav);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::vector<std::string> words;
    double last = 0;
    for (const auto& w : j["words"]) {
        words.push_back(w["word"]);
        EXPECT_LE(last, w["start"].get<double>());
        EXPECT_LE(w["start"].get<double>(), w["end"].get<double>());
        last = w["end"];
    }
    EXPECT_EQ(words, (std::vector<std::string>{"Hello", "world", "It's", "你", "好"}));
    EXPECT_EQ(j["classes"].size(), 10u);
    for (const auto& c : j["classes"]) EXPECT_TRUE(c.get<int>() >= 0 && c.get<int>() < 5000);
    const std::string tf = scratch() + "/transcript.txt";
    std::ofstream(tf) << "Hello, world! It's 你好.";
    CliRun f = run("align -m " + tiny_aligner() + " --format json -q --text-file " + tf + " " + kWav);
    ASSERT_EQ(f.status, 0) << f.err;
    EXPECT_EQ(nlohmann::json::parse(f.out)["words"], j["words"]);
    CliRun t = run("align -m " + tiny_aligner() + " -q --text " + text + " " + kWav);
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_EQ(lines(t.out), 5) << t.out;
    EXPECT_TRUE(std::regex_search(t.out, std::regex(R"(^\[\d\d:\d\d:\d\d\.\d{3} --> \d\d:\d\d:\d\d\.\d{3}\]  Hello\n)")))
        << t.out;
    CliRun srt = run("align -m " + tiny_aligner() + " -q --format srt --text " + text + " " + kWav);
    ASSERT_EQ(srt.status, 0) << srt.err;
    EXPECT_NE(srt.out.find("\n5\n"), std::string::npos) << srt.out;
    CliRun empty = run("align -m " + tiny_aligner() + " -q --format json --text '... !' " + kWav);
    ASSERT_EQ(empty.status, 0) << empty.err;
    EXPECT_TRUE(nlohmann::json::parse(empty.out)["words"].empty());
    // misuse: an ASR model to align, the aligner to transcribe, no text, two texts
    for (const std::string& args :
         {"align -m " + tiny() + " --text hi " + kWav, "transcribe -m " + tiny_aligner() + " " + kWav,
          "align -m " + tiny_aligner() + " " + kWav, "align -m " + tiny_aligner() + " --text a --text-file " + tf + " " + kWav,
          "transcribe -m " + tiny() + " --aligner " + tiny() + " " + kWav}) {
        CliRun e = run(args);
        EXPECT_NE(e.status, 0) << args;
        EXPECT_EQ(lines(e.err), 1) << args << ": " << e.err;
    }
    EXPECT_NE(run("align -m " + tiny() + " --text hi " + kWav).err.find("not a forced aligner"), std::string::npos);
    // a config whose timestamp id is not the tokenizer's <timestamp>
    const std::string bad = scratch() + "/aligner-bad-ts";
    fs::remove_all(bad);
    fs::copy(tiny_aligner(), bad, fs::copy_options::recursive);
    auto cfg = nlohmann::json::parse(std::ifstream(bad + "/config.json"));
    cfg["timestamp_token_id"] = 151704;
    std::ofstream(bad + "/config.json") << cfg.dump();
    CliRun e = run("align -m " + bad + " --text hi " + kWav);
    EXPECT_NE(e.status, 0);
    EXPECT_EQ(lines(e.err), 1) << e.err;
    EXPECT_NE(e.err.find("differs from the tokenizer's <timestamp> id 151705"), std::string::npos) << e.err;
    EXPECT_NE(run("transcribe -m " + tiny_aligner() + " " + kWav).err.find("is a forced aligner"), std::string::npos);
}

TEST(Cli, TranscribeWithAlignerTimesTheTranscriptsWords) {
    NEED_TOKENIZER();
    NEED_DEMO_MODEL();
    const std::string& demo = qasr_e2e::kDemo;
    const std::string wav = std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav";
    CliRun r = run("transcribe -m " + demo + " --aligner " + tiny_aligner() + " --format json -q " + wav);
    ASSERT_EQ(r.status, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    ASSERT_FALSE(j["text"].get<std::string>().empty());
    std::string joined;
    for (const auto& w : j["words"]) joined += w["word"].get<std::string>() + " ";
    std::string expect; // the text's letters, digits and apostrophes, a space after each word
    std::string word;
    for (char c : j["text"].get<std::string>() + " ") {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '\'') word += c;
        else if (c == ' ' && !word.empty()) expect += word + " ", word.clear();
    }
    EXPECT_EQ(joined, expect);
    CliRun t = run("transcribe -m " + demo + " --aligner " + tiny_aligner() + " -q " + wav);
    ASSERT_EQ(t.status, 0) << t.err;
    EXPECT_EQ(lines(t.out), int(j["words"].size())) << t.out;
}

TEST(Cli, BadModelDirectory) {
    CliRun r = run("transcribe -m /nonexistent/model " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("not a model directory"), std::string::npos) << r.err;
}

// A prompt and token cap beyond text_config.max_position_embeddings (RoPE past the trained positions) is refused
// with what to shorten; within them it runs. Here the tiny checkpoint claims 64 positions: its 1.3 s clip's prompt
// (32 tokens) with the default cap (⌈1.3·20⌉+64 = 90) does not fit, with 8 new tokens it does; a stream, whose
// segments run to 24 s, is refused at its start.
TEST(Cli, PromptAndCapBeyondTheModelsPositionsAreRefused) {
    NEED_TOKENIZER();
    const std::string d = broken_copy("positions", [](TensorToWrite&) { return true; });
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(d + "/config.json"));
    auto& text = cfg.contains("thinker_config") ? cfg["thinker_config"]["text_config"] : cfg["text_config"];
    text["max_position_embeddings"] = 64;
    std::ofstream(d + "/config.json") << cfg.dump();
    CliRun r = run("transcribe -m " + d + " " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("needs 123 positions (a prompt of 32 tokens, 0 of them the context's, and up to 91 generated), "
                         "more than the model's 64 (max_position_embeddings)"),
              std::string::npos)
        << r.err;
    r = run("transcribe -m " + d + " --max-new-tokens 8 -q " + kWav);
    EXPECT_EQ(r.status, 0) << r.err;
    r = run("stream -m " + d + " --file " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("the stream (segments of up to max_segment_windows"), std::string::npos) << r.err;
}

TEST(Cli, MissingAndMisshapedTensors) {
    NEED_TOKENIZER();
    const std::string miss = broken_copy("missing", [](TensorToWrite& w) { return w.name != "model.language_model.norm.weight"; });
    CliRun r = run("transcribe -m " + miss + " " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("missing model.language_model.norm.weight"), std::string::npos) << r.err;
    const std::string shape = broken_copy("shape", [](TensorToWrite& w) {
        if (w.name == "model.audio_tower.conv_out.weight") std::swap(w.shape[0], w.shape[1]);
        return true;
    });
    r = run("transcribe -m " + shape + " " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("conv_out.weight: expected [64,256], got [256,64]"), std::string::npos) << r.err;
}

TEST(Cli, TruncatedSafetensors) {
    NEED_TOKENIZER();
    const std::string d = broken_copy("truncated", [](TensorToWrite&) { return true; });
    fs::resize_file(d + "/model.safetensors", fs::file_size(d + "/model.safetensors") / 2);
    CliRun r = run("transcribe -m " + d + " " + kWav);
    EXPECT_NE(r.status, 0);
    EXPECT_EQ(lines(r.err), 1) << r.err;
    EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST(Cli, NonAudioAndEmptyFiles) {
    NEED_TOKENIZER();
    const std::string text = scratch() + "/not_audio.wav", empty = scratch() + "/empty.wav";
    std::ofstream(text) << "this is not audio at all\n";
    std::ofstream(empty).close();
    for (const auto& [f, want] : {std::pair{text, "[audio]"}, std::pair{empty, "empty file"}}) {
        CliRun r = run("transcribe --no-warmup -m " + tiny() + " " + f);
        EXPECT_NE(r.status, 0) << f;
        EXPECT_EQ(lines(r.err), 1) << r.err;
        EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    }
}

TEST(Cli, BadOptions) {
    for (const char* args : {"transcribe -m x --threads abc a.wav", "transcribe -m x --format xml a.wav",
                             "transcribe -m x --ignore-eos a.wav", "transcribe a.wav", "transcribe -m x --bogus a.wav",
                             "transcribe -m x --language Klingon a.wav", "transcribe -m x --compute fast a.wav", "frobnicate",
                             "quantize a b", "quantize a b --bits 4 --recipe mixed_4_6", "quantize a b --recipe mixed_9_9"}) {
        CliRun r = run(args);
        EXPECT_NE(r.status, 0) << args;
        EXPECT_EQ(lines(r.err), 1) << args << ": " << r.err;
    }
    CliRun h = run("transcribe --help");
    EXPECT_EQ(h.status, 0);
    EXPECT_NE(h.out.find("--ignore-eos"), std::string::npos);
}

// Compressed audio goes through FFmpeg's module, which the CLI finds beside itself (the build tree's lib/qasr, an
// install's ../lib/qasr): built with FFmpeg, `version` says so and a FLAC file transcribes; a module path that holds
// none (QASR_FFMPEG_MODULE) gives an error naming the file and where it looked; WAV input never needs the module.
TEST(Cli, FfmpegModuleIsFoundOrNamedInTheError) {
    NEED_DEMO_MODEL();
    const std::string wav = sample_wav("demo_en"), want = sample_text("demo_en");
    const bool ffmpeg = run("version").out.find("FFmpeg decoding yes") != std::string::npos;
#ifdef QASR_EXPECT_FFMPEG_MODULE
    ASSERT_TRUE(ffmpeg) << "built with FFmpeg, but the CLI did not find its module";
#else
    ASSERT_FALSE(ffmpeg);
#endif
    if (std::system("command -v sox >/dev/null 2>&1") != 0) GTEST_SKIP() << "sox not installed";
    const std::string flac = scratch() + "/module_test.flac";
    ASSERT_EQ(std::system(("sox " + wav + " " + flac).c_str()), 0);
    if (ffmpeg) {
        const CliRun ok = run("transcribe -q -m " + kDemo + " " + flac);
        EXPECT_EQ(ok.status, 0) << ok.err;
        EXPECT_EQ(ok.out, want + "\n");
    }
    const CliRun bad = system_run("QASR_FFMPEG_MODULE=/nonexistent/libqasr_ffmpeg.so " + std::string(QASR_BIN) +
                                  " transcribe -q -m " + kDemo + " " + flac);
    EXPECT_NE(bad.status, 0);
    EXPECT_NE(bad.err.find(flac + ": not a WAV file"), std::string::npos) << bad.err;
    if (ffmpeg) {
        EXPECT_NE(bad.err.find("/nonexistent/libqasr_ffmpeg.so"), std::string::npos) << bad.err;
    }
    const CliRun plain = system_run("QASR_FFMPEG_MODULE=/nonexistent/libqasr_ffmpeg.so " + std::string(QASR_BIN) +
                                    " transcribe -q -m " + kDemo + " " + wav);
    EXPECT_EQ(plain.status, 0) << plain.err;
    EXPECT_EQ(plain.out, want + "\n");
}

// FILE "-": standard input holds an audio file (recognized by its header) or raw s16le 16 kHz PCM; the bundled
// sample gives its transcript as a WAV, as its bare samples and (with FFmpeg and sox) as FLAC.
TEST(Cli, StdinTakesAFileOrRawPcm) {
    NEED_DEMO_MODEL();
    const std::string& demo = kDemo;
    const std::string wav = sample_wav("demo_en"), want = sample_text("demo_en");
    std::vector<std::string> inputs = {"< " + wav, "< <(tail -c +45 " + wav + ")"};
    const bool ffmpeg = run("version").out.find("FFmpeg decoding yes") != std::string::npos;
    if (ffmpeg && std::system("command -v sox >/dev/null 2>&1") == 0) inputs.push_back("< <(sox " + wav + " -t flac -)");
    for (const std::string& in : inputs) {
        const CliRun r = shell(std::string(QASR_BIN) + " transcribe -q -m " + demo + " - " + in);
        EXPECT_EQ(r.status, 0) << in << ": " << r.err;
        EXPECT_EQ(r.out, want + "\n") << in;
    }
}

// --print-colors: every character of the model's text wrapped in a 256-color code and a reset; without them the
// line is the transcript (the sample's text needs no ITN); each shade is the one its token's probability picks.
TEST(Cli, PrintColorsShadesTheTranscriptByProbability) {
    NEED_DEMO_MODEL();
    const std::string& demo = kDemo;
    const std::string wav = sample_wav("demo_en"), want = sample_text("demo_en");
    CliRun c = run("transcribe -q -pc -m " + demo + " " + wav);
    ASSERT_EQ(c.status, 0) << c.err;
    CliRun js = run("transcribe -q --format json -m " + demo + " " + wav);
    ASSERT_EQ(js.status, 0) << js.err;
    const auto j = nlohmann::json::parse(js.out);
    const std::regex code("\x1b\\[38;5;(\\d+)m([^\x1b]*)\x1b\\[0m");
    std::string plain;
    std::vector<int> shades;
    for (std::sregex_iterator it(c.out.begin(), c.out.end(), code), end; it != end; ++it) {
        shades.push_back(std::stoi((*it)[1]));
        plain += (*it)[2];
    }
    EXPECT_EQ(plain, want);
    EXPECT_EQ(std::regex_replace(c.out, code, "$2"), want + "\n");
    // the text's tokens: those after <asr_text>, one shade each (the sample's text is ASCII: a token per shade)
    const auto& toks = j["tokens"];
    std::vector<double> p;
    bool text = false;
    int asr_text = -1;
    std::set<int> added; // special tokens (the final <|im_end|>) write no text and get no shade
    const auto tokenizer = nlohmann::json::parse(std::ifstream(demo + "/tokenizer.json"));
    for (const auto& a : tokenizer["added_tokens"]) {
        if (a["content"] == "<asr_text>") asr_text = a["id"];
        added.insert(a["id"].get<int>());
    }
    ASSERT_GE(asr_text, 0);
    for (const auto& t : toks) {
        if (text && !added.count(t["id"].get<int>())) p.push_back(std::exp(t["logprob"].get<double>()));
        if (t["id"].get<int>() == asr_text) text = true;
    }
    ASSERT_TRUE(text);
    ASSERT_EQ(shades.size(), p.size());
    for (size_t i = 0; i < p.size(); ++i) {
        const int want_shade = p[i] >= 0.9 ? 40 : p[i] >= 0.75 ? 148 : p[i] >= 0.5 ? 220 : p[i] >= 0.2 ? 208 : 160;
        EXPECT_EQ(shades[i], want_shade) << i << " p=" << p[i];
    }
    for (const char* bad : {" --format srt", " --segment-seconds 5", " --raw", " -o /tmp"}) {
        CliRun r = run("transcribe -q -pc -m " + demo + bad + " " + wav);
        EXPECT_NE(r.status, 0) << bad;
        EXPECT_EQ(lines(r.err), 1) << bad << ": " << r.err;
    }
}

