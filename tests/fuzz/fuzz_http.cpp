// The HTTP server's fuzz target: `qasr serve` (tools/serve*.cpp on Debian's cpp-httplib) runs in this process on the
// tiny random model, and each input is sent to it as raw bytes over loopback TCP. The server must answer every
// connection in time, never with a 500 (an exception qasr did not expect), give JSON errors with a message, and
// keep serving. Request parsing is httplib's (a Debian library, not instrumented here); the routes, fields,
// uploads, live streams and responses behind it are qasr's and run under the sanitizers.
#include "fuzz_http.hpp"

#if QASR_FUZZ_HTTP
#include "serve.hpp"

#include "model/random_checkpoint.hpp"
#include "qasr/qasr.hpp"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

namespace qasr_fuzz {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void http_fail(const char* what, const std::string& request, const std::string& reply) {
    std::fprintf(stderr, "fuzz check failed in the HTTP target: %s\n--- request (%zu bytes) ---\n%.2000s\n--- reply (%zu "
                         "bytes) ---\n%.2000s\n", what, request.size(), request.c_str(), reply.size(), reply.c_str());
    __builtin_trap();
}

struct Running {
    qasr::Transcriber t;
    qasr::cli::ServeOptions o;
    qasr::cli::ServerControl ctl;
    int port = -1;
};

// The server, started once and left running for the life of the process.
Running* server() {
    static Running* r = []() -> Running* {
        if (!fs::exists(fs::path(QASR_TOKENIZER_DIR) / "tokenizer.json")) return nullptr;
        const fs::path tmp = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        std::string dir = (tmp / "qasr_fuzz_http_XXXXXX").string();
        if (!mkdtemp(dir.data())) return nullptr;
        static const std::string root = dir;
        std::atexit([] {
            std::error_code ec;
            fs::remove_all(root, ec);
        });
        qasr::write_random_checkpoint(dir + "/tiny", "tiny", "hf", 7, QASR_TOKENIZER_DIR);
        qasr::LoadOptions lo;
        lo.threads = 1;
        auto* x = new Running{qasr::Transcriber::load(dir + "/tiny", lo), {}, {}, -1};
        x->o.port = 0;
        x->o.parallel = 2;
        x->o.max_queue = 4;
        x->o.max_body_bytes = 256u << 10;
        x->o.max_audio_seconds = 3;
        x->o.max_new_tokens = 32;
        x->o.defaults.decode.max_new_tokens = 24; // the cap of requests that ask none (else ⌈seconds·20⌉+64)
        x->o.max_streams = 4;
        x->o.stream_idle_seconds = 5;
        x->o.read_timeout_seconds = 0.25;
        x->o.cors_origin = "*";
        x->o.log_requests = false;
        x->o.model_name = "tiny";
        x->o.device = "cpu";
        std::thread([x] { qasr::cli::run_server(x->t, x->o, x->ctl); }).detach();
        x->port = x->ctl.wait_port(30);
        if (x->port < 0) {
            std::fprintf(stderr, "the HTTP fuzz target's server did not start\n");
            std::abort();
        }
        return x;
    }();
    return r;
}

const std::string kNext = "\n@@@\n"; // between the requests of an input that go on connections of their own
const std::string kHealth = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

// Whether `reply` holds at least one whole final response (1xx ones skipped): its head and, by Content-Length or
// chunked framing, its body (none after a HEAD, a 204 or a 304). A response framed by the connection's close is
// whole only when the server closes.
bool has_whole_response(const std::string& reply, bool head_request) {
    for (size_t p = 0;;) {
        const size_t end = reply.find("\r\n\r\n", p);
        if (reply.compare(p, 9, "HTTP/1.1 ") != 0 || end == std::string::npos) return false;
        const int status = std::atoi(reply.substr(p + 9, 3).c_str());
        std::string head = reply.substr(p, end - p);
        for (auto& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
        if (status >= 100 && status < 200) { // 100 Continue: the final response follows
            p = end + 4;
            continue;
        }
        if (head_request || status == 204 || status == 304) return true;
        if (const size_t cl = head.find("\r\ncontent-length: "); cl != std::string::npos)
            return reply.size() - (end + 4) >= size_t(std::strtoull(head.c_str() + cl + 18, nullptr, 10));
        if (head.find("\r\ntransfer-encoding: chunked") != std::string::npos)
            return reply.find("0\r\n\r\n", end + 4) != std::string::npos;
        return false;
    }
}

// Sends `req` on a new connection and returns what comes back: until the server closes the connection, or 20 ms
// after the last bytes once a whole response has arrived (cpp-httplib keeps a connection open for 5 s after a
// response, and a request pipelined behind another waits those 5 s: its bytes sit in httplib's buffer while it
// polls the socket). A request left incomplete is closed by the server after its read timeout (0.25 s here). Not a
// half-close: httplib drops a half-closed connection unanswered. `timed_out` when no whole response came within
// 60 s (a sanitizer build transcribes slowly): the server hangs.
std::string exchange(int port, const std::string& req, bool& timed_out) {
    timed_out = false;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) std::abort();
    timeval tv{60, 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        http_fail("cannot connect to the server", req, "");
    }
    for (size_t sent = 0; sent < req.size();) {
        const ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; // the server answered early (413) and closed: read what it said
        sent += size_t(n);
    }
    const bool head_request = req.rfind("HEAD ", 0) == 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    std::string reply;
    char buf[65536];
    for (;;) {
        const bool whole = has_whole_response(reply, head_request);
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        pollfd p{fd, POLLIN, 0};
        // (EINTR: libFuzzer's -timeout alarm is a SIGALRM to the process, and any thread may take it)
        const int ready = poll(&p, 1, whole ? 20 : int(std::max<int64_t>(0, left.count())));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) {
            timed_out = !whole;
            break;
        }
        const ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break; // closed (or reset)
        reply.append(buf, size_t(n));
    }
    close(fd);
    return reply;
}

// The first response of `reply`: its status (0 if it does not start with a status line) and, where it has a
// Content-Length and a JSON type, its body.
int first_status(const std::string& reply, std::string& json_body) {
    json_body.clear();
    if (reply.rfind("HTTP/1.1 ", 0) != 0 || reply.size() < 12) return 0;
    const int status = std::atoi(reply.substr(9, 3).c_str());
    const size_t end = reply.find("\r\n\r\n");
    if (end == std::string::npos) return status;
    std::string head = reply.substr(0, end);
    for (auto& c : head) c = char(std::tolower(static_cast<unsigned char>(c)));
    const size_t cl = head.find("\r\ncontent-length: ");
    if (cl == std::string::npos || head.find("\r\ncontent-type: application/json") == std::string::npos) return status;
    const size_t n = size_t(std::strtoull(head.c_str() + cl + 18, nullptr, 10));
    json_body = reply.substr(end + 4, n);
    return status;
}

} // namespace

void prepare_http() { (void)server(); }

bool http(const uint8_t* data, size_t size) {
    Running* s = server();
    if (!s) return false;
    static const std::regex id_re(R"re("id"\s*:\s*"([0-9A-Za-z_-]+)")re");
    static std::string last_id = "0";
    const std::string in(reinterpret_cast<const char*>(data), size);
    size_t from = 0;
    for (int k = 0; k < 8 && from <= in.size(); ++k) {
        size_t to = in.find(kNext, from);
        if (to == std::string::npos) to = in.size();
        std::string req = in.substr(from, to - from);
        from = to + kNext.size();
        for (size_t at; (at = req.find("{ID}")) != std::string::npos;) req.replace(at, 4, last_id);
        if (req.empty()) continue;
        bool timed_out = false;
        const auto t0 = std::chrono::steady_clock::now();
        const std::string reply = exchange(s->port, req, timed_out);
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        static const bool trace = std::getenv("QASR_FUZZ_HTTP_TRACE") != nullptr; // each exchange on stderr
        if (trace) std::fprintf(stderr, "--- %zu bytes sent:\n%.300s\n--- %zu bytes back in %.0f ms:\n%.600s\n", req.size(), req.c_str(),
                              reply.size(), ms, reply.c_str());
        if (timed_out) { // with the server's own account of its slots (running, waiting, streams)
            bool t2 = false;
            const std::string h = exchange(s->port, kHealth, t2);
            if (std::getenv("QASR_FUZZ_HTTP_GDB")) // every thread's stack, to see where the server waits
                std::system(("gdb -p " + std::to_string(getpid()) + " -batch -ex 'thread apply all bt' >&2").c_str());
            http_fail("no answer within 60 s", req, reply + "\n--- GET /health then:\n" + h);
        }
        if (reply.find("HTTP/1.1 500 ") != std::string::npos) http_fail("a 500 (an unexpected exception)", req, reply);
        std::string body;
        const int status = first_status(reply, body);
        if (status >= 400 && !body.empty()) {
            const auto j = nlohmann::json::parse(body, nullptr, false);
            if (j.is_discarded() || !j.contains("error") || !j["error"].is_object() || !j["error"].contains("message") ||
                !j["error"]["message"].is_string())
                http_fail("an error body without error.message", req, reply);
        }
        std::smatch m;
        if (std::regex_search(reply, m, id_re)) last_id = m[1];
    }
    bool timed_out = false;
    const std::string health = exchange(s->port, kHealth, timed_out);
    if (health.rfind("HTTP/1.1 200 ", 0) != 0) http_fail("the server no longer answers GET /health", in, health);
    return true;
}

std::vector<std::vector<uint8_t>> http_seeds(uint8_t target) {
    if (!fs::exists(fs::path(QASR_TOKENIZER_DIR) / "tokenizer.json")) return {};
    // 0.2 s of a tone as a 16 kHz mono 16-bit WAV
    std::string pcm;
    for (int i = 0; i < 3200; ++i) {
        const int16_t v = int16_t(8000.0 * std::sin(0.09 * i));
        pcm.push_back(char(v & 0xff));
        pcm.push_back(char((v >> 8) & 0xff));
    }
    auto le = [](uint32_t v, int n) {
        std::string b;
        for (int i = 0; i < n; ++i) b.push_back(char((v >> (8 * i)) & 0xff));
        return b;
    };
    const std::string wav = "RIFF" + le(uint32_t(36 + pcm.size()), 4) + "WAVEfmt " + le(16, 4) + le(1, 2) + le(1, 2) +
                            le(16000, 4) + le(32000, 4) + le(2, 2) + le(16, 2) + "data" + le(uint32_t(pcm.size()), 4) + pcm;
    const std::string B = "qasrfuzzboundary";
    auto part = [&](const std::string& name, const std::string& value) {
        return "--" + B + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" + value + "\r\n";
    };
    auto multipart = [&](const std::string& path, const std::string& fields) {
        const std::string body = part("model", "qwen3-asr") + fields + "--" + B +
                                 "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: "
                                 "audio/wav\r\n\r\n" + wav + "\r\n--" + B + "--\r\n";
        return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=" + B +
               "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    };
    auto raw = [&](const std::string& path, const std::string& type, const std::string& body) {
        return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: " + type + "\r\nContent-Length: " +
               std::to_string(body.size()) + "\r\n\r\n" + body;
    };
    const std::string sep = kNext;
    const std::vector<std::string> inputs = {
        "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        multipart("/v1/audio/transcriptions", part("response_format", "verbose_json") + part("language", "en") +
                                                  part("max_new_tokens", "8") + part("temperature", "0")),
        multipart("/inference", part("response_format", "srt") + part("segment_seconds", "2") + part("prompt", "Names: qasr")),
        raw("/inference?response_format=text&itn=false&beam_size=2", "audio/wav", wav),
        raw("/v1/audio/transcriptions?stream=true&seed=3&temperature=0.7&top_p=0.9", "audio/wav", wav),
        raw("/v1/audio/transcriptions?language_only=true", "audio/wav", wav),
        raw("/v1/streams", "application/x-www-form-urlencoded", "language=en&chunk_seconds=0.5") + sep +
            raw("/v1/streams/{ID}/audio", "application/octet-stream", pcm) + sep + "GET /v1/streams/{ID} HTTP/1.1\r\nHost: x\r\n\r\n" +
            sep + raw("/v1/streams/{ID}/finish?response_format=verbose_json", "application/x-www-form-urlencoded", ""),
        raw("/v1/streams", "application/x-www-form-urlencoded", "") + sep +
            "DELETE /v1/streams/{ID} HTTP/1.1\r\nHost: x\r\n\r\n",
        "OPTIONS /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nOrigin: http://a\r\nAccess-Control-Request-Method: POST\r\n\r\n",
        "POST /inference HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\nTransfer-Encoding: chunked\r\n\r\n" +
            [&] {
                char h[16];
                std::snprintf(h, sizeof h, "%zx\r\n", wav.size());
                return std::string(h) + wav + "\r\n0\r\n\r\n";
            }(),
    };
    std::vector<std::vector<uint8_t>> out;
    for (const std::string& s : inputs) {
        std::vector<uint8_t> v{target};
        v.insert(v.end(), s.begin(), s.end());
        out.push_back(std::move(v));
    }
    return out;
}

} // namespace qasr_fuzz

#else // a build without the server (no cpp-httplib): the target is off

namespace qasr_fuzz {
bool http(const uint8_t*, size_t) { return false; }
void prepare_http() {}
std::vector<std::vector<uint8_t>> http_seeds(uint8_t) { return {}; }
} // namespace qasr_fuzz

#endif
