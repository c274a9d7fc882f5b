// `qasr serve`'s live streams: dictation over plain HTTP (no WebSocket needed). A client opens a stream, posts raw
// 16 kHz mono s16le PCM as it records (each answer carries the partial text: stable prefix + unstable tail), and
// finishes it (push-to-talk: on key release) to get the final transcript — the same Stream sessions as
// `qasr stream` and the C++ API, one per client, bounded in number and expired when idle.
#pragma once
#include "serve.hpp"
#include "serve_http.hpp"

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace qasr::cli {

class StreamRoutes {
public:
    using LogFn = std::function<void(const httplib::Request&, httplib::Response&, std::chrono::steady_clock::time_point,
                                     const std::string&)>;
    StreamRoutes(const Transcriber& t, const ServeOptions& o, http::Admission& adm, LogFn log)
        : t_(t), o_(o), adm_(adm), log_(std::move(log)) {}
    // POST /v1/streams, POST /v1/streams/ID/audio, POST /v1/streams/ID/finish, GET and DELETE /v1/streams/ID
    void install(httplib::Server& svr);
    size_t open_streams() const;

private:
    struct Entry;
    using Clock = std::chrono::steady_clock;
    Clock::time_point idle_since() const;
    std::shared_ptr<Entry> find(const std::string& id, bool remove);
    void sweep();
    void create(const httplib::Request& req, httplib::Response& res);
    void audio(const httplib::Request& req, httplib::Response& res);
    void finish(const httplib::Request& req, httplib::Response& res);

    const Transcriber& t_;
    const ServeOptions& o_;
    http::Admission& adm_;
    LogFn log_;
    mutable std::mutex m_;
    std::map<std::string, std::shared_ptr<Entry>> streams_;
};

} // namespace qasr::cli
