// `qasr serve`: HTTP transcription for many clients, on cpp-httplib (Debian's libcpp-httplib).
//
// Routes: POST /v1/audio/transcriptions (OpenAI's request and response shapes: multipart field `file`, `language`,
// `prompt`, `response_format` json|text|verbose_json, `temperature`) and POST /inference (whisper.cpp's server
// path, the same handler); the audio may also be the raw request body with the fields as query parameters.
// GET /health and GET /v1/models. Every error is a JSON body {"error": {"message", "type", "code"}} with a
// status that says whose fault it is: 400 bad request or audio, 401 key, 404/405 route, 413 too large or too long,
// 415 form encoding, 503 queue full or device out of memory, 500 anything else; the server keeps serving.
// Admission: at most `parallel` transcriptions run at once (each on its own Session of the one immutable model;
// on a GPU each takes a pooled device session), `max_queue` more wait, the rest are refused at once with 503
// and Retry-After rather than piling up.
#include "serve.hpp"

#include "audio/audio.hpp"
#include "core/error.hpp"
#include "text/output.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <new>
#include <stdexcept>

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

namespace {

using nlohmann::json;

// A request the client got wrong: status and message go back as they are.
struct HttpError : std::runtime_error {
    HttpError(int s, const std::string& m, const char* t = "invalid_request_error") : std::runtime_error(m), status(s), type(t) {}
    int status;
    const char* type;
};

class Admission {
public:
    Admission(int parallel, int max_queue) : parallel_(parallel), max_queue_(max_queue) {}
    bool enter() {
        std::unique_lock<std::mutex> lk(m_);
        if (running_ < parallel_ && waiting_ == 0) {
            ++running_;
            return true;
        }
        if (waiting_ >= max_queue_) return false;
        ++waiting_;
        cv_.wait(lk, [&] { return running_ < parallel_; });
        --waiting_;
        ++running_;
        return true;
    }
    void leave() {
        {
            std::lock_guard<std::mutex> lk(m_);
            --running_;
        }
        cv_.notify_one();
    }
    json state() const {
        std::lock_guard<std::mutex> lk(m_);
        return {{"running", running_}, {"waiting", waiting_}, {"parallel", parallel_}, {"max_queue", max_queue_}};
    }

private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    int running_ = 0, waiting_ = 0;
    const int parallel_, max_queue_;
};

void send_error(httplib::Response& res, int status, const std::string& msg, const char* type) {
    res.status = status;
    res.set_content(json{{"error", {{"message", msg}, {"type", type}, {"code", status}}}}.dump() + "\n",
                    "application/json");
}

// The request's audio and fields: multipart/form-data (field `file` is the audio, the other parts are fields), or
// the raw body with the fields as query parameters.
struct Upload {
    const std::string* audio = nullptr;
    std::string name = "upload";
    std::map<std::string, std::string> fields;
};

Upload read_upload(const httplib::Request& req) {
    Upload u;
    const std::string ct = req.get_header_value("Content-Type");
    if (ct.rfind("application/x-www-form-urlencoded", 0) == 0)
        throw HttpError(415, "send the audio as multipart/form-data (field 'file') or as the raw request body");
    if (req.is_multipart_form_data()) {
        for (const auto& [name, part] : req.files) {
            if (name == "file") {
                u.audio = &part.content;
                if (!part.filename.empty()) u.name = part.filename;
            } else {
                u.fields[name] = part.content;
            }
        }
    } else {
        if (!req.body.empty()) u.audio = &req.body;
    }
    for (const auto& [k, v] : req.params) u.fields.emplace(k, v); // form fields win over query parameters
    if (!u.audio || u.audio->empty())
        throw HttpError(400, "no audio: send a multipart/form-data field 'file', or the audio as the request body");
    return u;
}

bool to_bool(const std::string& field, const std::string& v) {
    if (v == "true" || v == "1" || v == "on" || v == "yes") return true;
    if (v == "false" || v == "0" || v == "off" || v == "no") return false;
    throw HttpError(400, "field '" + field + "' must be true or false, got '" + v + "'");
}
double to_number(const std::string& field, const std::string& v, double lo, double hi) {
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(x >= lo && x <= hi))
        throw HttpError(400, "field '" + field + "' must be a number in [" + json(lo).dump() + ", " + json(hi).dump() +
                                 "], got '" + v + "'");
    return x;
}

enum class Format { Json, Text, VerboseJson };

struct Request {
    TranscribeOptions opts;
    Format format = Format::Json;
};

Request parse_fields(const std::map<std::string, std::string>& f, const TranscribeOptions& defaults) {
    Request r;
    r.opts = defaults;
    auto get = [&](const char* k) -> const std::string* {
        const auto it = f.find(k);
        return it == f.end() ? nullptr : &it->second;
    };
    if (const auto* v = get("language")) {
        try {
            r.opts.language = v->empty() || *v == "auto" ? "" : canonical_language(*v);
        } catch (const Error& e) {
            throw HttpError(400, e.what());
        }
    }
    if (const auto* v = get("prompt")) r.opts.context = *v;
    if (const auto* v = get("context")) r.opts.context = *v;
    if (const auto* v = get("response_format")) {
        if (*v == "json" || v->empty()) r.format = Format::Json;
        else if (*v == "text") r.format = Format::Text;
        else if (*v == "verbose_json") r.format = Format::VerboseJson;
        else if (*v == "srt" || *v == "vtt")
            throw HttpError(400, "response_format '" + *v + "' needs timestamps, which Qwen3-ASR does not produce: use "
                                 "json, text or verbose_json");
        else throw HttpError(400, "response_format must be json, text or verbose_json, got '" + *v + "'");
    }
    if (const auto* v = get("temperature")) r.opts.decode.temperature = float(to_number("temperature", *v, 0, 100));
    if (const auto* v = get("top_p")) r.opts.decode.top_p = float(to_number("top_p", *v, 1e-6, 1));
    if (const auto* v = get("seed")) r.opts.decode.seed = uint64_t(to_number("seed", *v, 0, 9007199254740992.0));
    if (const auto* v = get("max_new_tokens"))
        r.opts.decode.max_new_tokens = int(to_number("max_new_tokens", *v, 1, 100000));
    if (const auto* v = get("itn")) r.opts.itn = to_bool("itn", *v);
    if (const auto* v = get("ignore_eos")) { // benchmarks with random weights: exactly max_new_tokens tokens
        r.opts.decode.ignore_eos = to_bool("ignore_eos", *v);
        if (r.opts.decode.ignore_eos && !get("max_new_tokens"))
            throw HttpError(400, "field 'ignore_eos' needs 'max_new_tokens'");
    }
    if (const auto* v = get("stream"); v && to_bool("stream", *v))
        throw HttpError(400, "streamed responses are not supported: send stream=false (or leave it out)");
    return r;
}

std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

void respond(httplib::Response& res, const TranscriptionResult& r, Format f) {
    res.status = 200;
    if (f == Format::Text) {
        res.set_content(r.text + "\n", "text/plain; charset=utf-8");
        return;
    }
    json j;
    if (f == Format::Json) {
        j = {{"text", r.text}};
    } else {
        json toks = json::array();
        for (const auto& t : r.tokens) toks.push_back({{"id", t.id}, {"logprob", t.logprob}});
        j = {{"task", "transcribe"},
             {"language", lower(r.language)},
             {"duration", r.audio_seconds},
             {"text", r.text},
             {"raw_text", r.raw_text},
             {"finish_reason", finish_reason_name(r.finish)},
             {"tokens", toks},
             {"rtf", r.rtf},
             {"timings_ms",
              {{"mel", r.timings.mel_ms}, {"encode", r.timings.encode_ms}, {"prefill", r.timings.prefill_ms},
               {"decode", r.timings.decode_ms}}}};
    }
    res.set_content(j.dump() + "\n", "application/json");
}

class Server {
public:
    Server(const Transcriber& t, const ServeOptions& o) : t_(t), o_(o), adm_(o.parallel, o.max_queue) {}

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
        svr.set_read_timeout(60, 0);
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
        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            json j = adm_.state();
            j["status"] = "ok";
            j["model"] = o_.model_name;
            j["device"] = o_.device;
            res.set_content(j.dump() + "\n", "application/json");
        });
        svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
            const json m = {{"id", o_.model_name}, {"object", "model"}, {"owned_by", "qasr"}};
            res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump() + "\n", "application/json");
        });
        svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
            if (!res.body.empty()) return; // the handler's own error body
            const int s = res.status;
            const std::string msg = s == 404   ? "no route " + req.method + " " + req.path +
                                                   " (POST /v1/audio/transcriptions, POST /inference, GET /health, "
                                                   "GET /v1/models)"
                                    : s == 413 ? "request body larger than the server's limit (--max-body-mb)"
                                    : s == 405 ? "method not allowed on " + req.path
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
        ctl.set_stopper([&svr] { svr.stop(); });
        if (!ctl.stopped()) svr.listen_after_bind();
        ctl.set_stopper(nullptr);
    }

private:
    void handle(const httplib::Request& req, httplib::Response& res) {
        const auto t0 = std::chrono::steady_clock::now();
        std::string what = "-";
        try {
            const Upload u = read_upload(req);
            const Request r = parse_fields(u.fields, o_.defaults);
            if (!adm_.enter()) {
                res.set_header("Retry-After", "1");
                throw HttpError(503, "server busy: " + std::to_string(o_.parallel) + " transcriptions running and " +
                                         std::to_string(o_.max_queue) + " waiting; retry later",
                                "server_busy");
            }
            struct Leave {
                Admission& a;
                ~Leave() { a.leave(); }
            } leave{adm_};
            std::vector<float> pcm;
            try {
                pcm = load_audio_bytes(reinterpret_cast<const uint8_t*>(u.audio->data()), u.audio->size(), u.name,
                                       o_.max_audio_seconds);
            } catch (const Error& e) {
                const bool too_long = std::string(e.what()).find("longer than the limit") != std::string::npos;
                throw HttpError(too_long ? 413 : 400, e.what());
            }
            const double decode_ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
            const TranscriptionResult tr = t_.transcribe(pcm, r.opts);
            respond(res, tr, r.format);
            char b[200];
            std::snprintf(b, sizeof b, "%.2f s audio (decoded in %.1f ms), %s, %zu tokens, transcribed in %.1f ms (RTF %.4f)",
                          tr.audio_seconds, decode_ms, tr.language.empty() ? "-" : tr.language.c_str(), tr.tokens.size(),
                          tr.timings.total_ms(), tr.rtf);
            what = b;
        } catch (const HttpError& e) {
            send_error(res, e.status, e.what(), e.type);
            what = e.what();
        } catch (const OutOfMemory& e) {
            res.set_header("Retry-After", "1");
            send_error(res, 503, e.what(), "server_busy");
            what = e.what();
        } catch (const Error& e) { // options the library refused are the client's; anything else is ours
            const bool client = std::string(e.what()).rfind("[options]", 0) == 0;
            send_error(res, client ? 400 : 500, e.what(), client ? "invalid_request_error" : "server_error");
            what = e.what();
        } catch (const std::bad_alloc&) {
            send_error(res, 503, "out of memory", "server_busy");
            what = "out of memory";
        } catch (const std::exception& e) {
            send_error(res, 500, e.what(), "server_error");
            what = e.what();
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        res.set_header("X-Processing-Ms", std::to_string(int64_t(ms)));
        if (o_.log_requests)
            std::fprintf(stderr, "qasr serve: %s %s %s %d %.1f ms: %s\n", req.remote_addr.c_str(), req.method.c_str(),
                         req.path.c_str(), res.status, ms, what.c_str());
    }

    const Transcriber& t_;
    const ServeOptions& o_;
    Admission adm_;
};

} // namespace

void run_server(const Transcriber& t, const ServeOptions& o, ServerControl& ctl) {
    Server s(t, o);
    s.run(ctl);
}

} // namespace qasr::cli
