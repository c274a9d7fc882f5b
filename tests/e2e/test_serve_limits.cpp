// `qasr serve`'s limits end to end, each test with a server of its own options: word timestamps from the aligner,
// batched decoding, the queue and the API key, SIGTERM, a client that hangs up, live streams' bounds, and random
// hostile requests that must never stop the server.
#include "serve_util.hpp"

#include <httplib.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using nlohmann::json;
using namespace qasr_serve_test;
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

