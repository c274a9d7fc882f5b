// `qasr serve`: transcription over HTTP for many clients — the routes, request parsing, admission control and
// responses (serve.cpp); the command line and signal handling are in cmd_serve.cpp.
#pragma once
#include "qasr/qasr.hpp"

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>

namespace qasr::cli {

struct ServeOptions {
    std::string host = "127.0.0.1";
    int port = 8080;                 // 0: any free port (the one chosen is printed)
    int parallel = 1;                // transcriptions running at once
    int max_queue = 16;              // requests waiting for a slot beyond those; more are answered 503
    size_t max_body_bytes = 100u << 20; // larger requests are answered 413
    double max_audio_seconds = 3600; // longer audio is answered 413 (checked while decoding)
    size_t max_prompt_bytes = 4096;  // a longer prompt/context field is answered 400 (a prefill over a huge context
                                     // would hold a slot for minutes)
    int max_new_tokens = 0;          // > 0: a request's max_new_tokens above this is answered 400 (0: up to the
                                     // model's positions); the automatic cap ⌈seconds·20⌉+64 is not limited by it
    int max_streams = 16;            // live streams open at once (POST /v1/streams); more are answered 503
    double stream_idle_seconds = 60; // a stream without a request for this long is dropped
    double read_timeout_seconds = 60; // a request whose bytes stop arriving for this long is dropped (the fuzz target
                                      // shortens it: an input that never completes its request costs that long)
    std::string cors_origin;         // non-empty: CORS headers for this origin ("*" for any), preflights answered
    std::string api_key;             // non-empty: /v1/* and /inference need "Authorization: Bearer KEY"
    TranscribeOptions defaults;      // language, context, ITN for requests that do not set them
    std::string model_name;          // the id /v1/models reports
    std::string device;              // for /health
    bool log_requests = true;        // one line per request on stderr
    const Aligner* aligner = nullptr; // --aligner: word timestamps (timestamp_granularities[]=word)
};

// Stops a running server from another thread (the signal watcher). stop() may be called again and again; a call
// made before the server listens is seen when it starts (the watcher repeats it until run_server returns).
class ServerControl {
public:
    void stop();
    bool stopped() const;
    void set_stopper(std::function<void()> f); // run_server's: stops the HTTP server
    // The port run_server listens on (ServeOptions::port 0: the one the system chose); waits up to `seconds` for
    // it to bind and returns -1 if it has not by then (in-process clients: tests, the server's fuzz target).
    int wait_port(double seconds) const;
    void set_port(int port); // run_server's, once bound

private:
    mutable std::mutex m_;
    mutable std::condition_variable cv_;
    int port_ = 0;
    bool stop_ = false;
    std::function<void()> stopper_;
};

// Binds, prints "qasr serve: listening on http://HOST:PORT" on stdout, serves until ctl.stop(); requests in
// progress finish first. Throws qasr::Error when the address cannot be bound.
void run_server(const Transcriber& t, const ServeOptions& o, ServerControl& ctl);

} // namespace qasr::cli
