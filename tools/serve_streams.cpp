// `qasr serve`'s live streams (serve_streams.hpp).
#include "serve_streams.hpp"

#include "api/transcriber_impl.hpp"
#include "core/error.hpp"

#include <cstdio>
#include <random>
#include <vector>

namespace qasr::cli {

using nlohmann::json;
using namespace http;

struct StreamRoutes::Entry {
    explicit Entry(Stream s) : st(std::move(s)) {}
    std::mutex m; // one request of a stream at a time (finish() may interrupt a running push first)
    Stream st;
    Clock::time_point last = Clock::now();
    std::string stable, unstable, language;
    double audio_seconds = 0;
};

namespace {

std::string new_id() { // 128 bits from the system's random source: ids are the streams' only credential
    static std::mutex m;
    static std::random_device rd;
    std::lock_guard<std::mutex> lk(m);
    std::string id;
    for (int i = 0; i < 4; ++i) {
        char b[9];
        std::snprintf(b, sizeof b, "%08x", static_cast<unsigned>(rd()));
        id += b;
    }
    return id;
}

const char* kId = "([0-9a-f]{32})";

} // namespace

StreamRoutes::Clock::time_point StreamRoutes::idle_since() const { // a stream last used before this has expired
    return Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.stream_idle_seconds));
}

size_t StreamRoutes::open_streams() const {
    std::lock_guard<std::mutex> lk(m_);
    return streams_.size();
}

std::shared_ptr<StreamRoutes::Entry> StreamRoutes::find(const std::string& id, bool remove) {
    std::lock_guard<std::mutex> lk(m_);
    const auto it = streams_.find(id);
    if (it == streams_.end()) throw HttpError(404, "no stream " + id + " (finished, deleted, or expired after " +
                                                       std::to_string(int(o_.stream_idle_seconds)) + " s idle)");
    auto e = it->second;
    if (std::unique_lock<std::mutex> idle(e->m, std::try_to_lock); idle && e->last < idle_since()) {
        idle.unlock();
        streams_.erase(it);
        throw HttpError(404, "no stream " + id + " (expired after " + std::to_string(int(o_.stream_idle_seconds)) +
                                 " s idle)");
    }
    if (remove) streams_.erase(it);
    return e;
}

void StreamRoutes::sweep() { // streams idle for longer than the limit (and not in a request) are dropped
    std::lock_guard<std::mutex> lk(m_);
    const auto limit = idle_since();
    for (auto it = streams_.begin(); it != streams_.end();) {
        std::unique_lock<std::mutex> busy(it->second->m, std::try_to_lock);
        if (busy && it->second->last < limit) {
            busy.unlock();
            it = streams_.erase(it);
        } else {
            ++it;
        }
    }
}

void StreamRoutes::create(const httplib::Request& req, httplib::Response& res) {
    const Upload u = read_upload(req, false);
    const Fields f = parse_fields(u.fields, o_);
    StreamOptions so;
    so.language = f.opts.language;
    so.context = f.opts.context;
    so.itn = f.opts.itn;
    if (const auto it = u.fields.find("chunk_seconds"); it != u.fields.end())
        so.chunk_seconds = to_number("chunk_seconds", it->second, 0.2, 30);
    if (const auto it = u.fields.find("pause_seconds"); it != u.fields.end())
        so.pause_seconds = to_number("pause_seconds", it->second, 0, 10);
    if (const auto it = u.fields.find("logprobs"); it != u.fields.end()) so.logprobs = to_bool("logprobs", it->second);
    sweep();
    {
        std::lock_guard<std::mutex> lk(m_);
        if (int(streams_.size()) >= o_.max_streams)
            throw HttpError(503, "too many open streams (" + std::to_string(o_.max_streams) + "); finish or delete one",
                            "server_busy");
    }
    auto e = std::make_shared<Entry>(t_.open_stream(so));
    const std::string id = new_id();
    {
        std::lock_guard<std::mutex> lk(m_);
        streams_.emplace(id, e);
    }
    res.status = 201;
    res.set_content(json_text(json{{"id", id}, {"object", "stream"}, {"sample_rate", 16000}, {"channels", 1}, {"encoding", "s16le"}}) + "\n",
                    "application/json");
}

void StreamRoutes::audio(const httplib::Request& req, httplib::Response& res) {
    if (req.is_multipart_form_data() || req.get_header_value("Content-Type").rfind("application/x-www-form", 0) == 0)
        throw HttpError(415, "send the stream's audio as the raw request body: 16 kHz mono signed 16-bit little-endian");
    if (req.body.size() % 2) throw HttpError(400, "s16le audio needs an even number of bytes");
    auto e = find(req.matches[1], false);
    std::lock_guard<std::mutex> lk(e->m);
    {
        const AdmissionSlot slot(adm_, o_.parallel, o_.max_queue);
        e->st.push_s16le(reinterpret_cast<const uint8_t*>(req.body.data()), req.body.size());
    }
    for (const auto& ev : e->st.poll()) {
        e->stable = ev.stable, e->unstable = ev.unstable, e->language = ev.language;
        e->audio_seconds = ev.audio_seconds;
    }
    e->last = Clock::now();
    res.status = 200;
    res.set_content(json_text(json{{"id", std::string(req.matches[1])},
                         {"stable", e->stable},
                         {"unstable", e->unstable},
                         {"text", e->stable + e->unstable},
                         {"language", e->language},
                         {"audio_seconds", e->audio_seconds},
                         {"quiet_seconds", e->st.trailing_quiet_seconds()}}) + "\n", // hands-free: finish after a pause
                    "application/json");
}

void StreamRoutes::finish(const httplib::Request& req, httplib::Response& res) {
    const Upload u = read_upload(req, false);
    const Fields f = parse_fields(u.fields, o_); // response_format
    auto e = find(req.matches[1], true);
    e->st.interrupt(); // push-to-talk: a push still running on another connection stops at its next stage boundary
    std::lock_guard<std::mutex> lk(e->m);
    const AdmissionSlot slot(adm_, o_.parallel, o_.max_queue);
    respond(res, e->st.finish(), f.format, false, f.logprobs ? &t_.impl().model->tokenizer : nullptr);
}

void StreamRoutes::install(httplib::Server& svr) {
    auto wrap = [this](void (StreamRoutes::*fn)(const httplib::Request&, httplib::Response&)) {
        return [this, fn](const httplib::Request& req, httplib::Response& res) {
            const auto t0 = Clock::now();
            const std::string err = guarded(res, [&] { (this->*fn)(req, res); });
            log_(req, res, t0, err.empty() ? "stream" : err);
        };
    };
    svr.Post("/v1/streams", wrap(&StreamRoutes::create));
    svr.Post(std::string("/v1/streams/") + kId + "/audio", wrap(&StreamRoutes::audio));
    svr.Post(std::string("/v1/streams/") + kId + "/finish", wrap(&StreamRoutes::finish));
    svr.Delete(std::string("/v1/streams/") + kId, [this](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            auto e = find(req.matches[1], true);
            e->st.interrupt();
            res.status = 204;
        });
    });
    svr.Get(std::string("/v1/streams/") + kId, [this](const httplib::Request& req, httplib::Response& res) {
        guarded(res, [&] {
            auto e = find(req.matches[1], false);
            std::lock_guard<std::mutex> lk(e->m);
            res.set_content(json_text(json{{"id", std::string(req.matches[1])}, {"stable", e->stable}, {"unstable", e->unstable},
                                 {"text", e->stable + e->unstable}, {"audio_seconds", e->audio_seconds}}) + "\n",
                            "application/json");
        });
    });
}

} // namespace qasr::cli
