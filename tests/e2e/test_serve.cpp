// `qasr serve` end to end: the real binary on a free port with the bundled demo model, driven by cpp-httplib's
// client — transcripts equal the CLI's expected output in every response format and both upload forms, bad
// requests get their status and a JSON error while the server keeps serving, limits (body size, audio length,
// queue, API key) hold, concurrent requests agree, a client that hangs up stops its transcription, and SIGTERM
// stops the server with exit status 0.
#include <httplib.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <random>
#include <sstream>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kDemo = std::string(QASR_SOURCE_DIR) + "/models/demo";

std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
std::string first_line(const std::string& p) {
    std::ifstream in(p);
    std::string s;
    std::getline(in, s);
    return s;
}

// A `qasr serve` child process: started with --port 0, its port read from the "listening on" line on stdout.
class ServerProcess {
public:
    explicit ServerProcess(const std::vector<std::string>& extra) {
        log_ = testing::TempDir() + "/qasr_serve_" + std::to_string(::getpid()) + "_" + std::to_string(count_++) + ".log";
        std::vector<std::string> args = {QASR_BIN, "serve", "-m", kDemo, "--port", "0", "--host", "127.0.0.1"};
        args.insert(args.end(), extra.begin(), extra.end());
        int fds[2];
        if (pipe(fds) != 0) return;
        pid_ = fork();
        if (pid_ == 0) {
            dup2(fds[1], 1);
            FILE* e = std::fopen(log_.c_str(), "w");
            if (e) dup2(fileno(e), 2);
            close(fds[0]);
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            execv(argv[0], argv.data());
            _exit(127);
        }
        close(fds[1]);
        std::string line;
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
        char c = 0;
        while (std::chrono::steady_clock::now() < until) {
            pollfd p{fds[0], POLLIN, 0};
            if (poll(&p, 1, 200) <= 0) continue;
            if (read(fds[0], &c, 1) != 1) break; // exited
            if (c != '\n') {
                line.push_back(c);
                continue;
            }
            const auto at = line.rfind(':');
            if (line.find("listening on") != std::string::npos && at != std::string::npos) port_ = std::atoi(line.c_str() + at + 1);
            break;
        }
        out_fd_ = fds[0];
    }
    ~ServerProcess() {
        if (pid_ > 0 && !exited_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        if (out_fd_ >= 0) close(out_fd_);
    }
    int port() const { return port_; }
    std::string log() const { return slurp(log_); }
    bool alive() {
        int st = 0;
        if (pid_ <= 0 || exited_) return false;
        if (waitpid(pid_, &st, WNOHANG) == pid_) exited_ = true;
        return !exited_;
    }
    // SIGTERM, then the exit status (-1: still running after `seconds`).
    int terminate(int seconds = 30) {
        kill(pid_, SIGTERM);
        for (int i = 0; i < seconds * 50; ++i) {
            int st = 0;
            if (waitpid(pid_, &st, WNOHANG) == pid_) {
                exited_ = true;
                return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        return -1;
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port_);
        c.set_read_timeout(120, 0);
        c.set_write_timeout(60, 0);
        return c;
    }

private:
    static inline std::atomic<int> count_{0};
    pid_t pid_ = -1;
    int port_ = 0, out_fd_ = -1;
    bool exited_ = false;
    std::string log_;
};

#define NEED_DEMO()                                                                                                    \
    if (!fs::exists(kDemo + "/tokenizer.json")) GTEST_SKIP() << "demo model tokenizer not installed"

httplib::Result post_file(httplib::Client& c, const std::string& bytes, httplib::MultipartFormDataItems fields = {},
                          const std::string& path = "/v1/audio/transcriptions") {
    fields.push_back({"file", bytes, "clip.wav", "audio/wav"});
    return c.Post(path.c_str(), fields);
}

std::string error_message(const httplib::Result& r) {
    const json j = json::parse(r->body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "(no JSON error: " + r->body + ")";
}

class Serve : public testing::Test {
protected:
    static void SetUpTestSuite() {
        if (fs::exists(kDemo + "/tokenizer.json")) server_ = new ServerProcess({"--max-audio-seconds", "20", "--max-body-mb", "2"});
    }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    void SetUp() override {
        if (!server_) GTEST_SKIP() << "demo model tokenizer not installed";
        ASSERT_GT(server_->port(), 0) << "server did not start: " << server_->log();
    }
    static ServerProcess* server_;
    const std::string en_ = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    const std::string de_ = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav");
    const std::string en_text_ = first_line(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.txt");
    const std::string de_text_ = first_line(std::string(QASR_SOURCE_DIR) + "/samples/demo_de.txt");
};
ServerProcess* Serve::server_ = nullptr;

} // namespace

TEST_F(Serve, MultipartUploadGivesTheCliTranscriptInEveryFormat) {
    auto c = server_->client();
    auto r = post_file(c, en_);
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(json::parse(r->body), json({{"text", en_text_}}));

    r = post_file(c, de_, {{"response_format", "text", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, de_text_ + "\n");

    r = post_file(c, en_, {{"response_format", "verbose_json", "", ""}, {"model", "whisper-1", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["text"], en_text_);
    EXPECT_EQ(j["language"], "english");
    EXPECT_NEAR(j["duration"].get<double>(), 3.037, 0.01);
    EXPECT_EQ(j["finish_reason"], "eos");
    EXPECT_GT(j["tokens"].size(), 5u);
    EXPECT_GT(j["rtf"].get<double>(), 0.0);
    ASSERT_EQ(j["segments"].size(), 1u); // the whole upload: one segment over its speech, all tokens
    EXPECT_EQ(j["segments"][0]["text"], en_text_);
    EXPECT_EQ(j["segments"][0]["tokens"].size(), j["tokens"].size());
    EXPECT_LT(j["segments"][0]["avg_logprob"].get<double>(), 0.0);
    EXPECT_GE(j["segments"][0]["start"].get<double>(), 0.0);
    EXPECT_LE(j["segments"][0]["end"].get<double>(), 3.04);

    EXPECT_GT(j["language_probability"].get<double>(), 0.5);

    // qasr's language_only: the language without the transcript
    r = post_file(c, de_, {{"language_only", "true", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json lid = json::parse(r->body);
    EXPECT_EQ(lid["text"], "");
    EXPECT_EQ(lid["language"], "german");
    EXPECT_GT(lid["language_probability"].get<double>(), 0.5);

    // OpenAI's timestamp_granularities[]: segment (sent with word too: word is refused, see the bad requests)
    r = post_file(c, en_, {{"response_format", "verbose_json", "", ""}, {"timestamp_granularities[]", "segment", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["segments"].size(), 1u);
    r = post_file(c, en_, {{"response_format", "verbose_json", "", ""}, {"timestamp_granularities[]", "segment", "", ""},
                           {"timestamp_granularities[]", "word", "", ""}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body; // both elements of the array are read

    // subtitles: one cue for this 3 s sample, the CLI's text
    r = post_file(c, en_, {{"response_format", "srt", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/x-subrip; charset=utf-8");
    EXPECT_EQ(r->body.rfind("1\n00:00:0", 0), 0u) << r->body;
    EXPECT_NE(r->body.find(" --> 00:00:0"), std::string::npos) << r->body;
    EXPECT_EQ(r->body.substr(r->body.find('\n', 4) + 1), en_text_ + "\n") << r->body;
    r = post_file(c, de_, {{"response_format", "vtt", "", ""}, {"segment_seconds", "20", "", ""}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "text/vtt; charset=utf-8");
    EXPECT_EQ(r->body.rfind("WEBVTT\n\n00:00:0", 0), 0u) << r->body;
    EXPECT_NE(r->body.find("\n" + de_text_ + "\n"), std::string::npos) << r->body;
}

TEST_F(Serve, RawBodyWithQueryFieldsAndWhisperCppPath) {
    auto c = server_->client();
    auto r = c.Post("/inference?response_format=text&language=de", de_, "audio/wav");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, de_text_ + "\n");
    // fields take effect: a forced language is the one reported; itn=false is accepted (the demo model already
    // writes numbers as digits, so the text is the same)
    r = c.Post("/v1/audio/transcriptions?response_format=verbose_json&itn=false&language=German", en_,
               "application/octet-stream");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json j = json::parse(r->body);
    EXPECT_EQ(j["language"], "german");
    EXPECT_FALSE(j["text"].get<std::string>().empty());
    // ignore_eos + max_new_tokens: exactly that many tokens (benchmarks with random weights)
    r = c.Post("/inference?response_format=verbose_json&ignore_eos=true&max_new_tokens=30", en_, "audio/wav");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["tokens"].size(), 30u);
    EXPECT_EQ(json::parse(r->body)["finish_reason"], "token_cap");
    // beam search
    r = c.Post("/inference?response_format=text&beam_size=3&length_penalty=0.8", de_, "audio/wav");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->body, de_text_ + "\n");
}

TEST_F(Serve, BadRequestsGetTheirStatusAndTheServerKeepsServing) {
    auto c = server_->client();
    struct Case {
        httplib::Result r;
        int status;
        const char* says;
    };
    std::vector<Case> cases;
    cases.push_back({post_file(c, "this is not audio at all, just text bytes"), 400, "not a recognised audio file"});
    cases.push_back({post_file(c, en_.substr(0, 30)), 400, "audio"}); // a truncated WAV header
    cases.push_back({c.Post("/v1/audio/transcriptions", "", "audio/wav"), 400, "no audio"});
    cases.push_back({post_file(c, en_, {{"language", "klingon", "", ""}}), 400, "unsupported language"});
    cases.push_back({post_file(c, en_, {{"response_format", "xml", "", ""}}), 400, "response_format"});
    cases.push_back({post_file(c, en_, {{"segment_seconds", "1", "", ""}}), 400, "segment_seconds"});
    cases.push_back({post_file(c, en_, {{"response_format", "verbose_json", "", ""}, {"timestamp_granularities[]", "word", "", ""}}),
                     400, "word timestamps"});
    cases.push_back({post_file(c, en_, {{"timestamp_granularities[]", "segment", "", ""}}), 400, "verbose_json"});
    cases.push_back({post_file(c, en_, {{"temperature", "hot", "", ""}}), 400, "temperature"});
    cases.push_back({post_file(c, en_, {{"beam_size", "40", "", ""}}), 400, "beam_size"});
    cases.push_back({post_file(c, en_, {{"beam_size", "2", "", ""}, {"temperature", "0.5", "", ""}}), 400, "sampling"});
    cases.push_back({post_file(c, en_, {{"language_only", "1", "", ""}, {"language", "en", "", ""}}), 400, "language_only"});
    cases.push_back({post_file(c, en_, {{"language_only", "1", "", ""}, {"response_format", "srt", "", ""}}), 400,
                     "language_only"});
    cases.push_back({post_file(c, en_, {{"stream", "true", "", ""}, {"response_format", "srt", "", ""}}), 400, "stream=true"});
    cases.push_back({post_file(c, en_, {{"itn", "maybe", "", ""}}), 400, "true or false"});
    cases.push_back({post_file(c, en_, {{"ignore_eos", "true", "", ""}}), 400, "needs 'max_new_tokens'"});
    cases.push_back({post_file(c, en_, {{"prompt", std::string(5000, 'a'), "", ""}}), 400, "--max-prompt-bytes"});
    // numbers out of their range, not finite, overflowing or with trailing bytes: each names its field and range
    for (const auto& [field, value] : std::vector<std::pair<const char*, const char*>>{
             {"temperature", "nan"}, {"temperature", "inf"}, {"max_new_tokens", "1e400"}, {"max_new_tokens", "0"},
             {"top_p", "0"}, {"seed", "-1"}, {"beam_size", "-3"}, {"length_penalty", "1e9"},
             {"segment_seconds", "-5"}, {"temperature", "0.5x"}})
        cases.push_back({post_file(c, en_, {{field, value, "", ""}}), 400, "must be a number in"});
    cases.push_back({c.Post("/v1/audio/transcriptions", "a=b", "application/x-www-form-urlencoded"), 415, "multipart"});
    // audio without its type (curl --data-binary sends this one): httplib refuses such bodies over 8 KB with 413
    // before any handler runs; the answer says what to send instead of blaming --max-body-mb
    cases.push_back({c.Post("/inference", en_, "application/x-www-form-urlencoded"), 415, "Content-Type: audio/wav"});
    // bytes that are not UTF-8 in a field or the path: a 400/404 whose JSON message shows them as U+FFFD (one
    // `GET /%FF` terminated the server: nlohmann's dump() threw inside httplib's error handler)
    cases.push_back({post_file(c, en_, {{"response_format", "\xff", "", ""}}), 400, "got '\xef\xbf\xbd'"});
    cases.push_back({post_file(c, en_, {{"language", "\xc3\x28", "", ""}}), 400, "unsupported language"});
    cases.push_back({c.Get("/%FF%FE"), 404, "no route GET /\xef\xbf\xbd"});
    cases.push_back({c.Get("/v1/audio/translations"), 404, "no route"});
    cases.push_back({post_file(c, std::string(3u << 20, 'x')), 413, "larger than"});
    for (const auto& k : cases) {
        ASSERT_TRUE(k.r) << k.says << ": " << httplib::to_string(k.r.error());
        EXPECT_EQ(k.r->status, k.status) << k.says << ": " << k.r->body;
        EXPECT_NE(error_message(k.r).find(k.says), std::string::npos) << error_message(k.r);
    }
    // 25 s of audio (limit 20 s) in a 0.8 MB WAV: refused as too long
    std::string longwav = en_.substr(0, 44);
    const uint32_t data_bytes = 25u * 16000u * 2u;
    std::string pcm(data_bytes, '\0');
    longwav += pcm;
    const uint32_t riff = uint32_t(longwav.size() - 8);
    std::memcpy(longwav.data() + 4, &riff, 4);
    std::memcpy(longwav.data() + 40, &data_bytes, 4);
    auto r = c.Post("/inference", longwav, "audio/wav");
    ASSERT_TRUE(r);
    if (en_.substr(36, 4) == "data") { // the sample is a plain 44-byte-header PCM WAV (16 kHz mono s16)
        EXPECT_EQ(r->status, 413) << r->body;
        EXPECT_NE(error_message(r).find("longer than the limit"), std::string::npos) << r->body;
    }
    // still serving
    r = post_file(c, en_);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["text"], en_text_);
    r = c.Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["status"], "ok");
    EXPECT_EQ(json::parse(r->body)["version"].get<std::string>().rfind("0.", 0), 0u) << r->body;
    EXPECT_FALSE(r->has_header("Access-Control-Allow-Origin")) << "no CORS unless --cors";
    r = c.Get("/v1/models");
    ASSERT_TRUE(r);
    EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "demo");
    // Prometheus metrics: the refusals above by status, the successful transcription in the histogram
    r = c.Get("/metrics");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    const std::string& m = r->body;
    auto value = [&](const std::string& series) {
        const auto at = m.find("\n" + series + " "); // a sample line, not the HELP line naming the series
        return at == std::string::npos ? -1.0 : std::atof(m.c_str() + at + series.size() + 2);
    };
    EXPECT_GE(value("qasr_requests_total{route=\"transcriptions\",status=\"400\"}"), 9.0) << m;
    EXPECT_GE(value("qasr_requests_total{route=\"transcriptions\",status=\"200\"}"), 1.0) << m;
    EXPECT_GE(value("qasr_transcription_seconds_count"), 1.0) << m;
    EXPECT_GE(value("qasr_audio_seconds_total"), 3.0) << m;
    EXPECT_EQ(value("qasr_running"), 0.0) << m;
    EXPECT_EQ(value("qasr_parallel"), 1.0) << m;
}

TEST_F(Serve, ConcurrentClientsGetTheSameTranscripts) {
    constexpr int kClients = 6;
    std::vector<std::string> got(kClients);
    std::vector<int> status(kClients, 0);
    std::vector<std::thread> th;
    for (int i = 0; i < kClients; ++i)
        th.emplace_back([&, i] {
            auto c = server_->client();
            auto r = post_file(c, i % 2 ? de_ : en_, {{"response_format", "text", "", ""}});
            if (r) status[i] = r->status, got[i] = r->body;
        });
    for (auto& t : th) t.join();
    for (int i = 0; i < kClients; ++i) {
        EXPECT_EQ(status[i], 200) << i; // parallel 1, queue 16: every request waits its turn
        EXPECT_EQ(got[i], (i % 2 ? de_text_ : en_text_) + "\n") << i;
    }
}

// --batch: the running requests decode together on one engine thread; every client gets its transcript, and
// /metrics shows batched steps (more requests than steps: steps carried several of them).
// --aligner: timestamp_granularities[]=word adds OpenAI's "words" (a random-weight aligner: the times are its, the
// words are the transcript's); without the granularity there is no "words".
TEST(ServeLimits, WordTimestampsFromTheAligner) {
    NEED_DEMO();
    const std::string al = testing::TempDir() + "/qasr_serve_aligner_" + std::to_string(::getpid());
    ASSERT_EQ(std::system((std::string(QASR_BIN) + " dev make-random --preset aligner-tiny --layout original --tokenizer " +
                           kDemo + " " + al + " >/dev/null 2>&1").c_str()), 0);
    {
        ServerProcess s({"--aligner", al, "--no-warmup", "-q"});
        ASSERT_GT(s.port(), 0) << s.log();
        auto c = s.client();
        const std::string en = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
        auto r = post_file(c, en, {{"response_format", "verbose_json", "", ""}, {"timestamp_granularities[]", "word", "", ""}});
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        ASSERT_TRUE(j.contains("words")) << r->body;
        std::string joined, expect, word;
        for (const auto& w : j["words"]) {
            joined += w["word"].get<std::string>() + " ";
            EXPECT_LE(w["start"].get<double>(), w["end"].get<double>());
        }
        for (char ch : j["text"].get<std::string>() + " ") {
            if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '\'') word += ch;
            else if (ch == ' ' && !word.empty()) expect += word + " ", word.clear();
        }
        EXPECT_FALSE(expect.empty());
        EXPECT_EQ(joined, expect);
        r = post_file(c, en, {{"response_format", "verbose_json", "", ""}, {"timestamp_granularities[]", "segment", "", ""}});
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        EXPECT_FALSE(json::parse(r->body).contains("words"));
    }
    fs::remove_all(al);
}

TEST(ServeLimits, BatchedDecodingGivesEveryClientItsTranscript) {
    NEED_DEMO();
    ServerProcess s({"--batch", "4", "-q", "--no-warmup"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string en = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    const std::string de = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_de.wav");
    const std::string en_text = first_line(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.txt");
    const std::string de_text = first_line(std::string(QASR_SOURCE_DIR) + "/samples/demo_de.txt");
    EXPECT_NE(s.log().find("decoding together up to 4"), std::string::npos) << s.log();
    constexpr int kClients = 8;
    std::vector<std::string> got(kClients);
    std::vector<int> status(kClients, 0);
    std::vector<std::thread> th;
    for (int i = 0; i < kClients; ++i)
        th.emplace_back([&, i] {
            auto c = s.client();
            auto r = post_file(c, i % 2 ? de : en, {{"response_format", "text", "", ""}});
            if (r) status[i] = r->status, got[i] = r->body;
        });
    for (auto& t : th) t.join();
    for (int i = 0; i < kClients; ++i) {
        EXPECT_EQ(status[i], 200) << i;
        EXPECT_EQ(got[i], (i % 2 ? de_text : en_text) + "\n") << i;
    }
    auto c = s.client();
    auto m = c.Get("/metrics");
    ASSERT_TRUE(m);
    const auto value = [&](const std::string& name) {
        const auto at = m->body.find("\n" + name + " ");
        return at == std::string::npos ? -1.0 : std::atof(m->body.c_str() + at + name.size() + 2);
    };
    const double steps = value("qasr_decode_batch_steps"), rows = value("qasr_decode_batch_rows");
    EXPECT_GT(steps, 0) << m->body;
    EXPECT_GT(rows, steps) << m->body; // some steps decoded several requests
    EXPECT_EQ(s.terminate(), 0) << s.log();
    ServerProcess zero_batch({"--batch", "0", "--no-warmup"}); // refused at start, clearly
    EXPECT_EQ(zero_batch.port(), 0);
    EXPECT_NE(zero_batch.log().find("--batch expects an integer in [1, 1024]"), std::string::npos) << zero_batch.log();
}

TEST(ServeLimits, FullQueueIsAnswered503AndApiKeyIsRequired) {
    NEED_DEMO();
    ServerProcess s({"--parallel", "1", "--max-queue", "0", "--api-key", "sesame", "-q", "--cors", "http://localhost:3000"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string wav = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    auto c = s.client();
    auto r = c.Options("/v1/audio/transcriptions"); // a browser's preflight: answered without the key
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 204);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000");
    EXPECT_NE(r->get_header_value("Access-Control-Allow-Headers").find("Authorization"), std::string::npos);
    r = post_file(c, wav);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    c.set_bearer_token_auth("wrong");
    r = post_file(c, wav);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "http://localhost:3000"); // on errors too
    r = c.Get("/health"); // open without the key
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    // 12 requests at once with room for one: some are refused at once with 503 + Retry-After, the rest succeed
    constexpr int kN = 12;
    std::vector<int> st(kN, 0);
    std::vector<std::string> retry(kN);
    std::atomic<int> ready{0};
    std::vector<std::thread> th;
    for (int i = 0; i < kN; ++i)
        th.emplace_back([&, i] {
            auto cl = s.client();
            cl.set_bearer_token_auth("sesame");
            httplib::MultipartFormDataItems f = {{"file", wav, "a.wav", "audio/wav"},
                                                 {"max_new_tokens", "200", "", ""}};
            ++ready;
            while (ready.load() < kN) std::this_thread::yield();
            auto rr = cl.Post("/v1/audio/transcriptions", f);
            if (rr) st[i] = rr->status, retry[i] = rr->get_header_value("Retry-After");
        });
    for (auto& t : th) t.join();
    int ok = 0, busy = 0;
    for (int i = 0; i < kN; ++i) {
        ok += st[i] == 200;
        busy += st[i] == 503;
        if (st[i] == 503) {
            EXPECT_EQ(retry[i], "1");
        }
    }
    EXPECT_EQ(ok + busy, kN);
    EXPECT_GE(ok, 1);
    EXPECT_GE(busy, 1) << "12 simultaneous requests with one slot and no queue: expected refusals";
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

TEST(ServeLimits, SigtermStopsGracefullyAndBadStartsFailClearly) {
    NEED_DEMO();
    ServerProcess s({"--no-warmup"});
    ASSERT_GT(s.port(), 0) << s.log();
    // a second server on the same port: a clear error, exit status 1
    const std::string cmd = std::string(QASR_BIN) + " serve -m " + kDemo + " --no-warmup --port " + std::to_string(s.port()) +
                            " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    const int rc = pclose(p);
    EXPECT_EQ(WEXITSTATUS(rc), 1) << out;
    EXPECT_NE(out.find("cannot listen on"), std::string::npos) << out;
    EXPECT_EQ(s.terminate(), 0) << s.log();
    EXPECT_NE(s.log().find("stopped"), std::string::npos) << s.log();
    // bad options: exit status 2 and one line
    p = popen((std::string(QASR_BIN) + " serve -m " + kDemo + " --parallel 0 2>&1").c_str(), "r");
    out.clear();
    while (fgets(buf, sizeof buf, p)) out += buf;
    EXPECT_EQ(WEXITSTATUS(pclose(p)), 2) << out;
    EXPECT_NE(out.find("--parallel expects an integer"), std::string::npos) << out;
}

// stream=true: server-sent events, a transcript.text.delta per piece of text as the model writes it, then
// transcript.text.done with the final text; the deltas concatenate to the text (the demo sample needs no ITN).
TEST_F(Serve, StreamedTranscriptionSendsDeltasThenTheText) {
    auto c = server_->client();
    for (const char* path : {"/v1/audio/transcriptions", "/inference"}) {
        const auto r = post_file(c, de_, {{"stream", "true", "", ""}}, path);
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200) << r->body;
        EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
        std::vector<json> events;
        std::stringstream ss(r->body);
        for (std::string line; std::getline(ss, line);) {
            if (line.empty()) continue;
            ASSERT_EQ(line.rfind("data: ", 0), 0u) << line;
            events.push_back(json::parse(line.substr(6)));
        }
        ASSERT_GE(events.size(), 3u) << r->body;
        std::string joined;
        for (size_t i = 0; i + 1 < events.size(); ++i) {
            EXPECT_EQ(events[i].value("type", ""), "transcript.text.delta") << events[i].dump();
            joined += events[i].value("delta", "");
        }
        const json& done = events.back();
        EXPECT_EQ(done.value("type", ""), "transcript.text.done");
        EXPECT_EQ(done.value("text", ""), de_text_);
        EXPECT_EQ(done.value("language", ""), "German");
        EXPECT_NEAR(done["usage"].value("seconds", 0.0), double(de_.size() - 44) / 32000, 0.01);
        EXPECT_EQ(joined, de_text_);
    }
    // an error after the headers: an error event (here a bad option the library refuses: beam search with ignore_eos)
    const auto bad = post_file(c, en_, {{"stream", "true", "", ""}, {"beam_size", "2", "", ""}, {"ignore_eos", "true", "", ""},
                                        {"max_new_tokens", "5", "", ""}});
    ASSERT_TRUE(bad);
    EXPECT_NE(bad->body.find("\"type\":\"error\""), std::string::npos) << bad->body;
    EXPECT_NE(bad->body.find("ignore_eos"), std::string::npos) << bad->body;
    const auto r = post_file(c, en_, {{"response_format", "text", "", ""}}); // and the server goes on
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body, en_text_ + "\n");
}

namespace {
// Sends a whole request on a socket of its own and hangs up without reading the answer.
bool post_and_hang_up(int port, const std::string& target, const std::string& body) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    const std::string req = "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: audio/wav\r\n"
                            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    for (size_t at = 0; ok && at < req.size();) {
        const ssize_t n = send(fd, req.data() + at, req.size() - at, MSG_NOSIGNAL);
        ok = n > 0;
        at += ok ? size_t(n) : 0;
    }
    close(fd);
    return ok;
}

// The count of answered requests of a route and status in GET /metrics (0 when absent).
long answered(httplib::Client& c, const std::string& route, int status) {
    const auto r = c.Get("/metrics");
    if (!r) return -1;
    const std::string key = "qasr_requests_total{route=\"" + route + "\",status=\"" + std::to_string(status) + "\"} ";
    const auto at = r->body.find(key);
    return at == std::string::npos ? 0 : std::atol(r->body.c_str() + at + key.size());
}
} // namespace

// A client that closes its connection while its transcription runs: the transcription stops (answered 499, nginx's
// "client closed request", in the log and the metrics) instead of running to its end, and the server goes on —
// alone and through a batch engine (where the engine's thread asks).
TEST(ServeLimits, ClientThatHangsUpStopsItsTranscription) {
    NEED_DEMO();
    // ~2 min of speech and pauses in 4 s pieces: seconds of work on the CPU, asked at every stage and step
    std::vector<char> wav;
    {
        const std::string one = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
        ASSERT_GT(one.size(), 44u);
        std::string pcm = one.substr(44) + std::string(32000, '\0');
        std::string all;
        while (all.size() < 120u * 32000) all += pcm;
        const auto le32 = [](uint32_t v) { return std::string{char(v), char(v >> 8), char(v >> 16), char(v >> 24)}; };
        const std::string h = "RIFF" + le32(uint32_t(36 + all.size())) + "WAVEfmt " + le32(16) +
                              std::string{1, 0, 1, 0} + le32(16000) + le32(32000) + std::string{2, 0, 16, 0} + "data" +
                              le32(uint32_t(all.size()));
        wav.assign(h.begin(), h.end());
        wav.insert(wav.end(), all.begin(), all.end());
    }
    const std::string body(wav.begin(), wav.end());
    for (const std::vector<std::string>& extra : {std::vector<std::string>{"--no-warmup"},
                                                  std::vector<std::string>{"--no-warmup", "--batch", "2"}}) {
        ServerProcess s(extra);
        ASSERT_GT(s.port(), 0) << s.log();
        auto c = s.client();
        ASSERT_TRUE(post_and_hang_up(s.port(), "/inference?segment_seconds=4&response_format=text", body));
        long gone = 0;
        for (int i = 0; i < 600 && (gone = answered(c, "transcriptions", 499)) == 0; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(gone, 1) << extra.back() << ": " << s.log();
        // the same with the answer streamed (stream=true: the transcription runs beside the writing of events)
        ASSERT_TRUE(post_and_hang_up(s.port(), "/inference?segment_seconds=4&stream=true", body));
        for (int i = 0; i < 600 && (gone = answered(c, "transcriptions", 499)) == 1; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        EXPECT_EQ(gone, 2) << extra.back() << ": " << s.log();
        EXPECT_EQ(answered(c, "transcriptions", 200), 0);
        EXPECT_NE(s.log().find("client closed the connection"), std::string::npos) << s.log();
        // the server goes on: the next request is transcribed
        const auto r = post_file(c, slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav"), {{"response_format", "text", "", ""}});
        ASSERT_TRUE(r);
        EXPECT_EQ(r->status, 200);
        EXPECT_EQ(r->body, first_line(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.txt") + "\n");
        EXPECT_EQ(answered(c, "transcriptions", 200), 1);
        EXPECT_EQ(s.terminate(), 0) << s.log();
    }
}

namespace {
std::string stream_id(const httplib::Result& r) {
    if (!r || r->status != 201) return "";
    return json::parse(r->body).value("id", "");
}
} // namespace

TEST_F(Serve, LiveStreamGivesPartialsAndTheOfflineFinal) {
    auto c = server_->client();
    const std::string id = stream_id(c.Post("/v1/streams", "", "application/octet-stream"));
    ASSERT_EQ(id.size(), 32u);
    const std::string pcm = en_.substr(44); // the sample's 16 kHz mono s16le data
    double last_seconds = 0;
    std::string last_text;
    for (size_t i = 0; i < pcm.size(); i += 8000) { // 0.25 s per request, as a recorder would send it
        auto r = c.Post(("/v1/streams/" + id + "/audio").c_str(), pcm.substr(i, 8000), "application/octet-stream");
        ASSERT_TRUE(r);
        ASSERT_EQ(r->status, 200) << r->body;
        const json j = json::parse(r->body);
        EXPECT_GE(j["audio_seconds"].get<double>(), last_seconds);
        last_seconds = j["audio_seconds"].get<double>();
        last_text = j["text"];
        EXPECT_EQ(j["text"], j["stable"].get<std::string>() + j["unstable"].get<std::string>());
    }
    EXPECT_GE(last_seconds, 2.0);
    EXPECT_FALSE(last_text.empty()) << "no partial text after 3 s of speech";
    { // half a second of silence after the speech: quiet_seconds (hands-free clients finish on it) counts it
        auto q = c.Post(("/v1/streams/" + id + "/audio").c_str(), std::string(16000, '\0'), "application/octet-stream");
        ASSERT_TRUE(q);
        ASSERT_EQ(q->status, 200) << q->body;
        EXPECT_GE(json::parse(q->body)["quiet_seconds"].get<double>(), 0.5) << q->body;
        last_text = json::parse(q->body)["text"];
    }
    auto r = c.Get(("/v1/streams/" + id).c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(json::parse(r->body)["text"], last_text);
    r = c.Post(("/v1/streams/" + id + "/audio").c_str(), std::string("abc"), "application/octet-stream");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body; // odd byte count
    r = c.Post(("/v1/streams/" + id + "/finish?response_format=verbose_json").c_str(), "", "application/octet-stream");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json f = json::parse(r->body);
    EXPECT_EQ(f["text"], en_text_); // the final decodes like offline
    EXPECT_EQ(f["language"], "english");
    ASSERT_EQ(f["segments"].size(), 1u); // one stream segment over the speech
    EXPECT_EQ(f["segments"][0]["text"], en_text_);
    EXPECT_LT(f["segments"][0]["end"].get<double>(), 3.04);
    r = c.Post(("/v1/streams/" + id + "/audio").c_str(), pcm.substr(0, 320), "application/octet-stream");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << r->body; // finished streams are gone
    EXPECT_NE(error_message(r).find("no stream"), std::string::npos);
}

TEST(ServeLimits, StreamsAreBoundedDeletableAndExpire) {
    NEED_DEMO();
    ServerProcess s({"--no-warmup", "-q", "--max-streams", "1", "--stream-idle-seconds", "1"});
    ASSERT_GT(s.port(), 0) << s.log();
    auto c = s.client();
    const std::string a = stream_id(c.Post("/v1/streams", "language=en", "application/x-www-form-urlencoded"));
    ASSERT_FALSE(a.empty());
    auto r = c.Post("/v1/streams", "", "application/octet-stream");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body; // one open at most
    r = c.Delete(("/v1/streams/" + a).c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 204);
    const std::string b = stream_id(c.Post("/v1/streams", "", "application/octet-stream"));
    ASSERT_FALSE(b.empty());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500)); // idle past the limit
    r = c.Get(("/v1/streams/" + b).c_str());
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 404) << r->body; // expired, also when asked for directly
    EXPECT_NE(error_message(r).find("expired"), std::string::npos) << r->body;
    const std::string d = stream_id(c.Post("/v1/streams", "", "application/octet-stream"));
    EXPECT_FALSE(d.empty()) << "the idle stream should have been dropped";
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string e = stream_id(c.Post("/v1/streams", "", "application/octet-stream"));
    EXPECT_FALSE(e.empty()) << "an idle stream is swept when another is opened";
    r = c.Post("/v1/streams", "language=klingon", "application/x-www-form-urlencoded");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(s.terminate(), 0) << s.log();
}

namespace {
// Sends `req` on a socket of its own and reads the answer until the server closes or `ms` pass.
std::string exchange(int port, const std::string& req, int ms) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return "";
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string out;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        bool ok = true;
        for (size_t at = 0; ok && at < req.size();) {
            const ssize_t n = send(fd, req.data() + at, req.size() - at, MSG_NOSIGNAL);
            ok = n > 0;
            at += ok ? size_t(n) : 0;
        }
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
        char buf[4096];
        while (std::chrono::steady_clock::now() < until) {
            pollfd p{fd, POLLIN, 0};
            if (poll(&p, 1, 50) <= 0) continue;
            const ssize_t n = recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            out.append(buf, size_t(n));
            // a whole answer (headers and Content-Length bytes, or a chunked body's last chunk) ends the wait: the
            // server may keep the connection open after one it could not parse
            const auto at = out.find("\r\n\r\n");
            if (at == std::string::npos) continue;
            const auto cl = out.find("Content-Length: ");
            if (cl != std::string::npos && cl < at && out.size() >= at + 4 + size_t(std::atol(out.c_str() + cl + 16))) break;
            if (out.find("\r\n0\r\n\r\n", at) != std::string::npos) break;
        }
    }
    close(fd);
    return out;
}
} // namespace

// Requests made of random pieces — methods, routes with raw and percent-encoded bytes (0x00–0xFF), query and
// multipart fields with random names and values, content types, bodies from a WAV sample to random bytes, headers
// with odd bytes: every answer that arrives has a status line and, for an error, a JSON error body; the server
// stays up, and answers /health and a transcription afterwards. (One `GET /%FF` used to terminate it.)
TEST(ServeLimits, RandomHostileRequestsNeverStopTheServer) {
    NEED_DEMO();
    ServerProcess s({"--max-audio-seconds", "20", "--max-body-mb", "1", "--max-streams", "4"});
    ASSERT_GT(s.port(), 0) << s.log();
    const std::string wav = slurp(std::string(QASR_SOURCE_DIR) + "/samples/demo_en.wav");
    std::mt19937 rng(20261207);
    auto pick = [&](std::initializer_list<const char*> l) { return std::string(*(l.begin() + rng() % l.size())); };
    auto bytes = [&](size_t n, bool any) {
        std::string b;
        for (size_t i = 0; i < n; ++i) b.push_back(any ? char(rng() % 256) : char("az09%&=/?._-\xff\xc3"[rng() % 15]));
        return b;
    };
    auto pct = [&](size_t n) { // percent-encoded random bytes
        std::string b;
        for (size_t i = 0; i < n; ++i) {
            char h[4];
            std::snprintf(h, sizeof h, "%%%02X", unsigned(rng() % 256));
            b += h;
        }
        return b;
    };
    const std::vector<std::string> fields = {"language", "prompt", "response_format", "temperature", "itn", "segment_seconds",
                                             "max_new_tokens", "top_p", "seed", "beam_size", "length_penalty",
                                             "language_only", "stream", "timestamp_granularities[]", "chunk_seconds",
                                             "pause_seconds", "ignore_eos", "context"};
    const std::vector<std::string> values = {"en", "auto", "verbose_json", "srt", "text", "json", "0", "1", "1e400", "nan",
                                             "-1", "true", "word", "segment", "0.5", "16", "99999999999", ""};
    int answered = 0, statuses[6] = {0, 0, 0, 0, 0, 0};
    for (int i = 0; i < 160; ++i) {
        const std::string method = pick({"GET", "POST", "POST", "POST", "DELETE", "PUT", "OPTIONS", "F\x01O"});
        std::string path = pick({"/v1/audio/transcriptions", "/inference", "/v1/streams", "/v1/streams/", "/health",
                                 "/metrics", "/v1/models", "/", ""});
        if (path == "/v1/streams/") path += pick({"0123456789abcdef", "zz", ""}) + pick({"/audio", "/finish", ""});
        if (rng() % 4 == 0) path += rng() % 2 ? pct(1 + rng() % 4) : bytes(1 + rng() % 4, true);
        std::string query;
        for (int k = int(rng() % 4); k > 0; --k) {
            const std::string key = rng() % 5 ? fields[rng() % fields.size()] : pct(2);
            const std::string val = rng() % 3 ? values[rng() % values.size()] : (rng() % 2 ? pct(3) : bytes(3, false));
            query += (query.empty() ? "?" : "&") + key + "=" + val;
        }
        std::string body, type;
        switch (rng() % 6) {
        case 0: break;
        case 1: body = wav, type = "audio/wav"; break;
        case 2: body = wav.substr(0, rng() % wav.size()), type = pick({"audio/wav", "application/octet-stream", ""}); break;
        case 3: body = bytes(rng() % 20000, true), type = pick({"audio/wav", "application/x-www-form-urlencoded", ""}); break;
        default: { // multipart with random fields, the audio or random bytes as `file`
            const std::string b = "qasrB" + std::to_string(rng());
            for (int k = int(rng() % 4); k > 0; --k) {
                const std::string name = rng() % 4 ? fields[rng() % fields.size()] : bytes(3, true);
                const std::string val = rng() % 3 ? values[rng() % values.size()] : bytes(4, true);
                body += "--" + b + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + val + "\r\n";
            }
            if (rng() % 4) {
                const std::string file = rng() % 2 ? wav : bytes(rng() % 3000, true);
                body += "--" + b + "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"" + bytes(5, true) +
                        ".wav\"\r\nContent-Type: audio/wav\r\n\r\n" + file + "\r\n";
            }
            body += "--" + b + (rng() % 5 ? "--\r\n" : "\r\n");
            type = "multipart/form-data; boundary=" + b;
        }
        }
        std::string req = method + " " + path + query + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
        if (!type.empty()) req += "Content-Type: " + type + "\r\n";
        if (rng() % 3) req += "X-Odd: " + bytes(8, true) + "\r\n";
        if (method != "GET" || !body.empty()) req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
        req += "\r\n" + body;
        const std::string ans = exchange(s.port(), req, 10000);
        ASSERT_TRUE(s.alive()) << "request " << i << " stopped the server: " << method << " " << path << query << "\n"
                               << s.log();
        if (ans.empty()) { // httplib may close a connection it cannot parse
            if (std::getenv("QASR_TEST_VERBOSE")) std::printf("[hostile] no answer: %s\n", req.substr(0, 160).c_str());
            continue;
        }
        ASSERT_EQ(ans.rfind("HTTP/1.1 ", 0), 0u) << ans.substr(0, 200);
        const int status = std::atoi(ans.c_str() + 9);
        ++answered, ++statuses[std::min(status / 100, 5)];
        EXPECT_LT(status, 500) << method << " " << path << query << ": " << ans.substr(0, 400);
        if (status >= 400 && ans.find("Transfer-Encoding: chunked") == std::string::npos) {
            const auto at = ans.find("\r\n\r\n");
            ASSERT_NE(at, std::string::npos);
            const auto cl = ans.find("Content-Length: ");
            const size_t len = cl == std::string::npos || cl > at ? std::string::npos : size_t(std::atol(ans.c_str() + cl + 16));
            const json j = json::parse(ans.substr(at + 4, len), nullptr, false); // (a pipelined answer may follow)
            EXPECT_TRUE(j.is_object() && j.contains("error")) << method << " " << path << query << ": " << ans.substr(0, 400);
        }
    }
    std::printf("[hostile] %d of 160 answered: 2xx %d, 4xx %d, 5xx %d\n", answered, statuses[2], statuses[4], statuses[5]);
    EXPECT_GT(answered, 120);
    EXPECT_GT(statuses[4], 60);
    auto c = s.client();
    auto r = c.Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    r = post_file(c, wav, {{"response_format", "text", "", ""}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
}
