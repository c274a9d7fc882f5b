// Helpers of the `qasr serve` end-to-end tests (test_serve.cpp, test_serve_limits.cpp): the real binary on a free
// port with the bundled demo model, requests through cpp-httplib or raw sockets.
#pragma once
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

namespace qasr_serve_test {

inline const std::string kDemo = std::string(QASR_SOURCE_DIR) + "/models/demo";

inline std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
inline std::string first_line(const std::string& p) {
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

inline httplib::Result post_file(httplib::Client& c, const std::string& bytes, httplib::MultipartFormDataItems fields = {},
                          const std::string& path = "/v1/audio/transcriptions") {
    fields.push_back({"file", bytes, "clip.wav", "audio/wav"});
    return c.Post(path.c_str(), fields);
}

inline std::string error_message(const httplib::Result& r) {
    const json j = json::parse(r->body, nullptr, false);
    return j.is_object() && j.contains("error") ? j["error"].value("message", "") : "(no JSON error: " + r->body + ")";
}

// Sends a whole request on a socket of its own and hangs up without reading the answer.
inline bool post_and_hang_up(int port, const std::string& target, const std::string& body) {
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
inline long answered(httplib::Client& c, const std::string& route, int status) {
    const auto r = c.Get("/metrics");
    if (!r) return -1;
    const std::string key = "qasr_requests_total{route=\"" + route + "\",status=\"" + std::to_string(status) + "\"} ";
    const auto at = r->body.find(key);
    return at == std::string::npos ? 0 : std::atol(r->body.c_str() + at + key.size());
}
inline std::string stream_id(const httplib::Result& r) {
    if (!r || r->status != 201) return "";
    return json::parse(r->body).value("id", "");
}
// Sends `req` on a socket of its own and reads the answer until the server closes or `ms` pass.
inline std::string exchange(int port, const std::string& req, int ms) {
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
} // namespace qasr_serve_test
