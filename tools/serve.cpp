// `qasr serve`: HTTP transcription for many clients, on cpp-httplib (Debian's libcpp-httplib).
//
// Routes: POST /v1/audio/transcriptions (OpenAI's request and response shapes: multipart field `file`, `language`,
// `prompt`, `response_format` json|text|verbose_json|srt|vtt, `temperature`) and POST /inference (whisper.cpp's server
// path, the same handler); the audio may also be the raw request body with the fields as query parameters.
// GET /health, GET /metrics (Prometheus) and GET /v1/models; live streams under /v1/streams (serve_streams.cpp).
// Every error is a JSON body {"error": {"message", "type", "code"}} with a status that says whose fault it is: 400 bad request or audio, 401 key, 404/405 route, 413 too large or too long,
// 415 form encoding, 503 queue full or device out of memory, 500 anything else; the server keeps serving. A client
// that closes its connection while its transcription runs stops it (http::client_gone; logged and counted as 499).
// Admission: at most `parallel` transcriptions run at once (each on its own Session of the one immutable model;
// on a GPU each takes a pooled device session), `max_queue` more wait, the rest are refused at once with 503
// and Retry-After rather than piling up.
#include "serve.hpp"
#include "serve_http.hpp"
#include "serve_streams.hpp"

#include "api/transcriber_impl.hpp"
#include "audio/audio.hpp"
#include "core/error.hpp"
#include "qasr/qasr.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

namespace qasr::cli {

void ServerControl::stop() {
    std::lock_guard<std::mutex> lk(m_);
    stop_ = true;
    if (stopper_) stopper_();
}
bool ServerControl::stopped() const {
    std::lock_guard<std::mutex> lk(m_);
    return stop_;
}
void ServerControl::set_stopper(std::function<void()> f) {
    std::lock_guard<std::mutex> lk(m_);
    stopper_ = std::move(f);
}
void ServerControl::set_port(int port) {
    {
        std::lock_guard<std::mutex> lk(m_);
        port_ = port;
    }
    cv_.notify_all();
}
int ServerControl::wait_port(double seconds) const {
    std::unique_lock<std::mutex> lk(m_);
    cv_.wait_for(lk, std::chrono::duration<double>(seconds), [this] { return port_ > 0; });
    return port_ > 0 ? port_ : -1;
}

namespace {

using nlohmann::json;
using namespace http;

class Server {
public:
    Server(const Transcriber& t, const ServeOptions& o)
        : t_(t), o_(o), adm_(o.parallel, o.max_queue),
          streams_(t, o, adm_, [this](const httplib::Request& q, httplib::Response& r, std::chrono::steady_clock::time_point t0,
                                      const std::string& w) { log(q, r, t0, w); }) {}

    void run(ServerControl& ctl) {
        httplib::Server svr;
        const size_t workers = size_t(o_.parallel) + size_t(o_.max_queue) + 8;
        svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
        svr.set_payload_max_length(o_.max_body_bytes);
        // SO_REUSEADDR only: cpp-httplib's default also sets SO_REUSEPORT, with which a second server on the same port
        // binds too and the kernel splits the connections between the two
        svr.set_socket_options([](socket_t sock) {
            int yes = 1;
            setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        });
        svr.set_read_timeout(time_t(o_.read_timeout_seconds), long(std::fmod(o_.read_timeout_seconds, 1.0) * 1e6));
        svr.set_write_timeout(60, 0);
        svr.set_keep_alive_timeout(5);
        // Responses go out as a header write and a body write: with Nagle's algorithm the body waits for the client's
        // delayed ACK of the header (40 ms on Linux) — measured: 72 ms per request instead of 31 on the demo model
        svr.set_tcp_nodelay(true);
        if (!o_.cors_origin.empty()) // browser clients (a web page doing dictation against a local server)
            svr.set_default_headers({{"Access-Control-Allow-Origin", o_.cors_origin},
                                     {"Access-Control-Allow-Methods", "GET, POST, OPTIONS"},
                                     {"Access-Control-Allow-Headers", "Authorization, Content-Type"},
                                     {"Access-Control-Max-Age", "600"}});
        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (req.method == "OPTIONS" && !o_.cors_origin.empty()) { // a CORS preflight: no key needed
                res.status = 204;
                return httplib::Server::HandlerResponse::Handled;
            }
            if (o_.api_key.empty() || !(req.path.rfind("/v1/", 0) == 0 || req.path == "/inference"))
                return httplib::Server::HandlerResponse::Unhandled;
            if (req.get_header_value("Authorization") == "Bearer " + o_.api_key)
                return httplib::Server::HandlerResponse::Unhandled;
            send_error(res, 401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error");
            return httplib::Server::HandlerResponse::Handled;
        });
        auto transcribe = [this](const httplib::Request& req, httplib::Response& res) { handle(req, res); };
        svr.Post("/v1/audio/transcriptions", transcribe);
        svr.Post("/inference", transcribe);
        streams_.install(svr);
        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            json j = adm_.state();
            j["streams"] = streams_.open_streams();
            j["status"] = "ok";
            j["model"] = o_.model_name;
            j["device"] = o_.device;
            j["version"] = qasr_version();
            res.set_content(json_text(j) + "\n", "application/json");
        });
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            json g = adm_.state();
            g["streams"] = streams_.open_streams();
            if (const BatchEngine* e = t_.impl().engine.get()) { // decode steps run, and Σ requests over them
                const BatchEngine::Stats st = e->stats();
                g["decode_batch_steps"] = st.steps;
                g["decode_batch_rows"] = st.rows;
            }
            res.set_content(metrics_.text(g), "text/plain; version=0.0.4");
        });
        svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            const json m = {{"id", o_.model_name}, {"object", "model"}, {"owned_by", "qasr"}};
            res.set_content(json_text(json{{"object", "list"}, {"data", json::array({m})}}) + "\n", "application/json");
        });
        svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return; // the handler's own error body
            // httplib refuses an application/x-www-form-urlencoded body over 8 KB with 413 before any handler runs:
            // that is audio sent without a Content-Type (`curl --data-binary @a.wav` sends that type), not a body
            // over --max-body-mb; the smaller ones get the same answer from read_upload
            const bool form = req.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0;
            if (res.status == 413 && form) res.status = 415;
            const int s = res.status;
            const std::string msg = s == 404   ? "no route " + req.method + " " + req.path +
                                                   " (POST /v1/audio/transcriptions, POST /inference, POST /v1/streams, "
                                                   "GET /health, GET /v1/models)"
                                    : s == 415 ? std::string(kFormEncodedAudio)
                                    : s == 413 ? "request body larger than the server's limit (--max-body-mb)"
                                    : s == 405 ? "method not allowed on " + req.path
                                    : s == 400 && req.method == "POST"
                                        ? "malformed HTTP request (a POST needs a Content-Length, 0 for none: curl -d '')"
                                    : s == 400 ? "malformed HTTP request" +
                                                     (req.method.empty() ? std::string() : " (method " + req.method + ")")
                                               : "request failed (HTTP " + std::to_string(s) + ")";
            send_error(res, s, msg, s >= 500 ? "server_error" : "invalid_request_error");
        });
        svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
            send_error(res, 500, "internal error", "server_error");
        });
        const int port = o_.port == 0 ? svr.bind_to_any_port(o_.host) : (svr.bind_to_port(o_.host, o_.port) ? o_.port : -1);
        if (port < 0)
            fail("serve", "cannot listen on " + o_.host + ":" + std::to_string(o_.port) +
                              " (address in use, or not an address of this machine)");
        std::printf("qasr serve: listening on http://%s:%d\n", o_.host.c_str(), port);
        std::fflush(stdout);
        ctl.set_port(port); // bound and listening: connections wait in the backlog until the accept loop runs
        ctl.set_stopper([&svr] { svr.stop(); });
        if (!ctl.stopped()) svr.listen_after_bind();
        ctl.set_stopper(nullptr);
    }

private:
    void handle(const httplib::Request& req, httplib::Response& res) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string what;
        double audio_s = 0;
        bool streamed = false;
        const std::string err = guarded(res, [&] {
            const Upload u = read_upload(req);
            const Fields r = parse_fields(u.fields, o_);
            if (r.words && !o_.aligner)
                throw HttpError(400, "word timestamps need a forced aligner: start the server with --aligner DIR "
                                     "(Qwen3-ForcedAligner); timestamp_granularities[]=segment works without");
            auto slot = std::make_shared<AdmissionSlot>(adm_, o_.parallel, o_.max_queue);
            std::vector<float> pcm;
            try {
                pcm = load_audio_bytes(reinterpret_cast<const uint8_t*>(u.audio->data()), u.audio->size(), u.name,
                                       o_.max_audio_seconds);
            } catch (const TooLong& e) {
                throw HttpError(413, e.what());
            } catch (const Error& e) { // not audio, or malformed
                throw HttpError(400, e.what());
            }
            const double decode_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            TranscribeOptions opts = r.opts;
            opts.abort = client_gone(req); // a client that goes away stops its transcription (→ 499)
            if (r.stream) { // the transcription runs while the answer is written (stream_events); it logs itself
                stream_events(req, res, std::move(slot), std::move(pcm), std::move(opts), r.logprobs, t0, decode_ms);
                streamed = true;
                return;
            }
            TranscriptionResult tr = t_.transcribe(pcm, opts);
            if (r.words) o_.aligner->add_words(pcm, tr);
            respond(res, tr, r.format, r.opts.language_only, r.logprobs ? &t_.impl().model->tokenizer : nullptr);
            char b[200];
            std::snprintf(b, sizeof b, "%.2f s audio (decoded in %.1f ms), %s, %zu tokens, transcribed in %.1f ms (RTF %.4f)",
                          tr.audio_seconds, decode_ms, tr.language.empty() ? "-" : tr.language.c_str(), tr.tokens.size(),
                          tr.timings.total_ms(), tr.rtf);
            what = b;
            audio_s = tr.audio_seconds;
        });
        if (!streamed) log(req, res, t0, err.empty() ? what : err, audio_s);
    }

    // stream=true (OpenAI's streamed transcription): server-sent events, `data: {"type": "transcript.text.delta",
    // "delta": …}` as the model writes the text (TranscribeOptions::on_text_tokens: before inverse text normalization),
    // then `data: {"type": "transcript.text.done", "text": …}` with the final text (and qasr's language and
    // duration), or `data: {"type": "error", "error": {…}}`. With include[]=logprobs each delta lists its tokens
    // (TranscribeOptions::on_text_tokens) and the done event all of the transcript's, as json answers list them
    // (tokens of trailing whitespace are there alone). The transcription runs on a thread of its own while this
    // connection's thread writes the events, so that a slow reader never holds up a batch engine's steps; a client
    // that goes away (a failed write, or client_gone) stops it. The admission slot is held until the last event.
    void stream_events(const httplib::Request& req, httplib::Response& res, std::shared_ptr<AdmissionSlot> slot,
                       std::vector<float> pcm, TranscribeOptions opts, bool logprobs,
                       std::chrono::steady_clock::time_point t0, double decode_ms) {
        struct Feed {
            std::mutex m;
            std::condition_variable cv;
            std::vector<json> deltas; // the events
            bool done = false;
            std::atomic<bool> gone{false};
        };
        auto feed = std::make_shared<Feed>();
        auto audio = std::make_shared<std::vector<float>>(std::move(pcm));
        const Tokenizer* tok = logprobs ? &t_.impl().model->tokenizer : nullptr;
        opts.on_text_tokens = [feed, tok](const std::string& d, const std::vector<TokenInfo>& tokens) {
            json e{{"type", "transcript.text.delta"}, {"delta", d}};
            if (tok) e["logprobs"] = delta_logprobs(tokens, *tok);
            std::lock_guard<std::mutex> lk(feed->m);
            feed->deltas.push_back(std::move(e));
            feed->cv.notify_one();
        };
        opts.abort = [feed, hung_up = std::move(opts.abort)] { return feed->gone.load() || (hung_up && hung_up()); };
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider("text/event-stream", [this, &req, feed, audio, opts, slot, t0, decode_ms,
                                                                  logprobs](size_t, httplib::DataSink& sink) {
            const auto send = [&](const json& e) {
                const std::string line = "data: " + json_text(e) + "\n\n";
                if (!feed->gone && !sink.write(line.data(), line.size())) feed->gone = true;
            };
            TranscriptionResult tr;
            std::exception_ptr failed;
            std::thread worker([&] {
                try {
                    tr = t_.transcribe(*audio, opts);
                } catch (...) {
                    failed = std::current_exception();
                }
                std::lock_guard<std::mutex> lk(feed->m);
                feed->done = true;
                feed->cv.notify_one();
            });
            for (bool last = false; !last;) {
                std::vector<json> ds;
                {
                    std::unique_lock<std::mutex> lk(feed->m);
                    feed->cv.wait(lk, [&] { return feed->done || !feed->deltas.empty(); });
                    ds.swap(feed->deltas);
                    last = feed->done;
                }
                for (const json& d : ds) send(d);
            }
            worker.join();
            int status = 200;
            std::string what;
            if (!failed) {
                json done{{"type", "transcript.text.done"}, {"text", tr.text}, {"language", tr.language},
                          {"usage", {{"type", "duration"}, {"seconds", tr.audio_seconds}}}};
                if (logprobs) done["logprobs"] = transcript_logprobs(tr, t_.impl().model->tokenizer);
                send(done);
                char b[200];
                std::snprintf(b, sizeof b, "%.2f s audio (decoded in %.1f ms), %s, %zu tokens, streamed in %.1f ms (RTF %.4f)",
                              tr.audio_seconds, decode_ms, tr.language.empty() ? "-" : tr.language.c_str(),
                              tr.tokens.size(), tr.timings.total_ms(), tr.rtf);
                what = b;
            } else { // the headers are out: the error goes as an event, its status into the log and the metrics
                httplib::Response err;
                what = guarded(err, [&] { std::rethrow_exception(failed); });
                status = err.status;
                const json body = json::parse(err.body, nullptr, false);
                send({{"type", "error"}, {"error", body.is_object() && body.contains("error") ? body["error"] : json(what)}});
            }
            if (feed->gone && !failed) status = 499, what = "the client closed the connection before the last event";
            record(req, status, t0, what, failed ? 0 : tr.audio_seconds);
            sink.done();
            return true;
        });
    }

    // The metrics and the log line of a finished request; returns its milliseconds since t0.
    double record(const httplib::Request& req, int status, std::chrono::steady_clock::time_point t0, const std::string& what,
                  double audio_seconds) {
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        const std::string& p = req.path;
        const char* route = p.rfind("/v1/streams", 0) != 0         ? "transcriptions"
                            : p.size() > 6 && p.ends_with("/audio")  ? "stream_audio"
                            : p.size() > 7 && p.ends_with("/finish") ? "stream_finish"
                                                                     : "stream_open";
        metrics_.request(route, status, ms / 1000.0, audio_seconds);
        if (o_.log_requests)
            std::fprintf(stderr, "qasr serve: %s %s %s %d %.1f ms: %s\n", req.remote_addr.c_str(), req.method.c_str(),
                         req.path.c_str(), status, ms, what.c_str());
        return ms;
    }

    void log(const httplib::Request& req, httplib::Response& res, std::chrono::steady_clock::time_point t0,
             const std::string& what, double audio_seconds = 0) {
        const double ms = record(req, res.status, t0, what, audio_seconds);
        res.set_header("X-Processing-Ms", std::to_string(int64_t(ms)));
    }

    const Transcriber& t_;
    const ServeOptions& o_;
    Admission adm_;
    Metrics metrics_;
    StreamRoutes streams_;
};

} // namespace

void run_server(const Transcriber& t, const ServeOptions& o, ServerControl& ctl) {
    Server s(t, o);
    s.run(ctl);
}

} // namespace qasr::cli
