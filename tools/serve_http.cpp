// `qasr serve`'s shared HTTP pieces (serve_http.hpp).
#include "serve_http.hpp"

#include "commands.hpp"

#include "core/error.hpp"
#include "text/output.hpp"
#include "text/tokenizer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <new>
#include <sstream>

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

namespace qasr::cli::http {

using nlohmann::json;

bool Admission::enter() {
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

void Admission::leave() {
    {
        std::lock_guard<std::mutex> lk(m_);
        --running_;
    }
    cv_.notify_one();
}

json Admission::state() const {
    std::lock_guard<std::mutex> lk(m_);
    return {{"running", running_}, {"waiting", waiting_}, {"parallel", parallel_}, {"max_queue", max_queue_}};
}

AdmissionSlot::AdmissionSlot(Admission& a, int parallel, int max_queue) : a_(a) {
    if (!a_.enter())
        throw HttpError(503, "server busy: " + std::to_string(parallel) + " transcriptions running and " +
                                 std::to_string(max_queue) + " waiting; retry later",
                        "server_busy");
}

std::string guarded(httplib::Response& res, const std::function<void()>& body) {
    try {
        body();
        return "";
    } catch (const HttpError& e) {
        if (e.status == 503) res.set_header("Retry-After", "1");
        send_error(res, e.status, e.what(), e.type);
        return e.what();
    } catch (const OutOfMemory& e) {
        res.set_header("Retry-After", "1");
        send_error(res, 503, e.what(), "server_busy");
        return e.what();
    } catch (const Cancelled&) { // client_gone(): nobody reads this answer
        send_error(res, 499, "the client closed the connection: transcription cancelled", "client_closed_request");
        return "the client closed the connection: transcription cancelled";
    } catch (const Error& e) { // options the library refused are the client's; anything else is ours
        const bool client = std::string(e.what()).rfind("[options]", 0) == 0 || std::string(e.what()).rfind("[stream]", 0) == 0;
        send_error(res, client ? 400 : 500, e.what(), client ? "invalid_request_error" : "server_error");
        return e.what();
    } catch (const std::bad_alloc&) {
        res.set_header("Retry-After", "1");
        send_error(res, 503, "out of memory", "server_busy");
        return "out of memory";
    } catch (const std::exception& e) {
        send_error(res, 500, e.what(), "server_error");
        return e.what();
    }
}

using nlohmann::json;

namespace {

// A socket's own (peer = false) or its peer's address as cpp-httplib writes it (numeric host, port).
bool endpoint(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage a{};
    socklen_t n = sizeof a;
    if ((peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &n) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &n)) != 0)
        return false;
    if (a.ss_family != AF_INET && a.ss_family != AF_INET6) return false;
    char host[NI_MAXHOST], serv[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&a), n, host, sizeof host, serv, sizeof serv, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    ip = host;
    port = std::atoi(serv);
    return true;
}

// The descriptor of req's connection, or -1.
int client_socket(const httplib::Request& req) {
    if (req.remote_port < 0 || req.remote_addr.empty()) return -1;
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int found = -1;
    while (const dirent* e = readdir(d)) {
        char* end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end || fd == dirfd(d)) continue;
        std::string ip;
        int port = -1;
        if (!endpoint(int(fd), true, ip, port) || port != req.remote_port || ip != req.remote_addr) continue;
        if (req.local_port >= 0 && (!endpoint(int(fd), false, ip, port) || port != req.local_port)) continue;
        found = int(fd);
        break;
    }
    closedir(d);
    return found;
}

bool peer_closed(int fd) {
    pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
    char c;
    return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0; // readable: end of stream, or the next request's bytes
}

} // namespace

std::function<bool()> client_gone(const httplib::Request& req) {
    const int fd = client_socket(req);
    if (fd < 0) return {};
    // each session has its own copy (a file's pieces may run at once), asked by one thread at a time
    return [fd, next = std::chrono::steady_clock::time_point()]() mutable {
        const auto now = std::chrono::steady_clock::now();
        if (now < next) return false;
        next = now + std::chrono::milliseconds(50);
        return peer_closed(fd);
    };
}

void send_error(httplib::Response& res, int status, const std::string& msg, const char* type) {
    res.status = status;
    res.set_content(json_text(json{{"error", {{"message", msg}, {"type", type}, {"code", status}}}}) + "\n",
                    "application/json");
}

// A field's value; an array field ("name[]", sent once per element) collects its elements joined with ","
static void add_field(std::map<std::string, std::string>& f, const std::string& name, const std::string& v) {
    const bool array = name.size() > 2 && name.compare(name.size() - 2, 2, "[]") == 0;
    auto [it, fresh] = f.emplace(name, v);
    if (!fresh) it->second = array ? it->second + "," + v : v;
}

Upload read_upload(const httplib::Request& req, bool need_audio) {
    Upload u;
    const std::string ct = req.get_header_value("Content-Type");
    if (need_audio && ct.rfind("application/x-www-form-urlencoded", 0) == 0) // (its fields arrive as params)
        throw HttpError(415, kFormEncodedAudio);
    if (req.is_multipart_form_data()) {
        for (const auto& [name, part] : req.files) {
            if (name == "file") {
                u.audio = &part.content;
                if (!part.filename.empty()) u.name = part.filename;
            } else {
                add_field(u.fields, name, part.content);
            }
        }
    } else {
        if (!req.body.empty()) u.audio = &req.body;
    }
    std::map<std::string, std::string> query;
    for (const auto& [k, v] : req.params) add_field(query, k, v);
    for (const auto& [k, v] : query) u.fields.emplace(k, v); // form fields win over query parameters
    if (need_audio && (!u.audio || u.audio->empty()))
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

Fields parse_fields(const std::map<std::string, std::string>& f, const ServeOptions& o) {
    Fields r;
    r.opts = o.defaults;
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
    for (const char* k : {"prompt", "context"}) {
        const auto* v = get(k);
        if (!v) continue;
        if (v->size() > o.max_prompt_bytes)
            throw HttpError(400, "field '" + std::string(k) + "' is " + std::to_string(v->size()) +
                                     " bytes, more than this server takes (" + std::to_string(o.max_prompt_bytes) +
                                     ", --max-prompt-bytes)");
        r.opts.context = *v;
    }
    if (const auto* v = get("response_format")) {
        if (*v == "json" || v->empty()) r.format = Format::Json;
        else if (*v == "text") r.format = Format::Text;
        else if (*v == "verbose_json") r.format = Format::VerboseJson;
        else if (*v == "srt") r.format = Format::Srt;
        else if (*v == "vtt") r.format = Format::Vtt;
        else throw HttpError(400, "response_format must be json, text, verbose_json, srt or vtt, got '" + *v + "'");
    }
    // OpenAI's timestamp_granularities[] (with verbose_json): "segment" segments the audio as srt/vtt do; "word"
    // asks for word timestamps, which the server's forced aligner (qasr serve --aligner) adds
    bool granular = false;
    for (const char* k : {"timestamp_granularities[]", "timestamp_granularities"}) {
        const auto* v = get(k);
        if (!v) continue;
        std::stringstream ss(*v);
        for (std::string g; std::getline(ss, g, ',');) {
            if (g == "word") r.words = true;
            else if (g != "segment")
                throw HttpError(400, "timestamp_granularities must be segment or word, got '" + g + "'");
            granular = true;
        }
    }
    if (granular && r.format != Format::VerboseJson)
        throw HttpError(400, "timestamp_granularities needs response_format verbose_json");
    if (r.words) r.opts.max_piece_seconds = Aligner::max_piece_seconds;
    if (const auto* v = get("segment_seconds")) {
        r.opts.segment_seconds = to_number("segment_seconds", *v, 0, 1200);
        if (r.opts.segment_seconds != 0 && r.opts.segment_seconds < 2)
            throw HttpError(400, "field 'segment_seconds' must be 0 (off) or between 2 and 1200, got '" + *v + "'");
    } else if (r.format == Format::Srt || r.format == Format::Vtt || granular) {
        r.opts.segment_seconds = 10;
    }
    if (const auto* v = get("temperature")) r.opts.decode.temperature = float(to_number("temperature", *v, 0, 100));
    if (const auto* v = get("beam_size")) r.opts.decode.beam_size = int(to_number("beam_size", *v, 1, 16));
    if (const auto* v = get("length_penalty"))
        r.opts.decode.length_penalty = float(to_number("length_penalty", *v, -10, 10));
    if (r.opts.decode.beam_size > 1 && r.opts.decode.temperature > 0)
        throw HttpError(400, "field 'beam_size' decodes without sampling: it needs temperature 0");
    if (const auto* v = get("top_p")) r.opts.decode.top_p = float(to_number("top_p", *v, 1e-6, 1));
    if (const auto* v = get("seed")) r.opts.decode.seed = uint64_t(to_number("seed", *v, 0, 9007199254740992.0));
    if (const auto* v = get("max_new_tokens")) {
        r.opts.decode.max_new_tokens = int(to_number("max_new_tokens", *v, 1, 100000));
        if (o.max_new_tokens > 0 && r.opts.decode.max_new_tokens > o.max_new_tokens)
            throw HttpError(400, "field 'max_new_tokens' is " + *v + ", more than this server allows (" +
                                     std::to_string(o.max_new_tokens) + ", --max-new-tokens)");
    }
    if (const auto* v = get("itn")) r.opts.itn = to_bool("itn", *v);
    if (const auto* v = get("language_only")) { // language identification: decoding stops at the language tag
        r.opts.language_only = to_bool("language_only", *v);
        if (r.opts.language_only && !r.opts.language.empty())
            throw HttpError(400, "field 'language_only' detects the language: it cannot be combined with 'language'");
        if (r.opts.language_only && r.opts.segment_seconds > 0)
            throw HttpError(400, "field 'language_only' cannot be combined with segments (srt, vtt, segment_seconds)");
    }
    if (const auto* v = get("ignore_eos")) { // benchmarks with random weights: exactly max_new_tokens tokens
        r.opts.decode.ignore_eos = to_bool("ignore_eos", *v);
        if (r.opts.decode.ignore_eos && !get("max_new_tokens"))
            throw HttpError(400, "field 'ignore_eos' needs 'max_new_tokens'");
    }
    if (const auto* v = get("stream"); v && to_bool("stream", *v)) { // server-sent events: the text as it is written
        if (r.format != Format::Json && r.format != Format::Text)
            throw HttpError(400, "stream=true answers the text as it is written and then the whole: use "
                                 "response_format json or text (segments and subtitles come with stream=false)");
        r.stream = true;
    }
    for (const char* k : {"include[]", "include"}) { // OpenAI's include[]: "logprobs"
        const auto* v = get(k);
        if (!v) continue;
        std::stringstream ss(*v);
        for (std::string g; std::getline(ss, g, ',');)
            if (g == "logprobs") r.logprobs = true;
            else throw HttpError(400, "include[] takes logprobs, got '" + g + "'");
    }
    if (r.logprobs && r.format != Format::Json && r.format != Format::VerboseJson)
        throw HttpError(400, "include[]=logprobs needs response_format json or verbose_json");
    return r;
}

static std::string lower(std::string s) {
    for (auto& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// One entry of a "logprobs" array: {"token", "logprob", "bytes"}.
static json token_logprob(const std::string& bytes, float logprob) {
    std::vector<int> b;
    for (const char c : bytes) b.push_back(int(static_cast<unsigned char>(c)));
    return {{"token", bytes}, {"logprob", logprob}, {"bytes", b}}; // "token": invalid UTF-8 → U+FFFD
}

// The transcript's tokens for include[]=logprobs: a piece's tokens after its <asr_text> (all of them where the
// language was forced: no tag is generated then), special tokens left out.
json transcript_logprobs(const TranscriptionResult& r, const Tokenizer& tok) {
    const std::optional<int> asr_text = tok.token_id("<asr_text>");
    bool tagged = false;
    for (const auto& t : r.tokens) tagged = tagged || (asr_text && t.id == *asr_text);
    std::vector<bool> piece_start(r.tokens.size() + 1, false);
    for (const Segment& s : r.segments)
        if (s.first_token < piece_start.size()) piece_start[s.first_token] = true;
    json out = json::array();
    bool in_text = !tagged;
    for (size_t i = 0; i < r.tokens.size(); ++i) {
        const TokenInfo& t = r.tokens[i];
        if (piece_start[i]) in_text = !tagged;
        const std::string bytes = tok.decode_bytes({t.id});
        if (asr_text && t.id == *asr_text) in_text = true;
        else if (bytes.empty()) in_text = !tagged; // an end token: the next piece begins with its tag
        else if (in_text) out.push_back(token_logprob(bytes, t.logprob));
    }
    return out;
}

json delta_logprobs(const std::vector<TokenInfo>& tokens, const Tokenizer& tok) {
    json out = json::array();
    for (const TokenInfo& t : tokens)
        if (const std::string bytes = tok.decode_bytes({t.id}); !bytes.empty()) out.push_back(token_logprob(bytes, t.logprob));
    return out;
}

void respond(httplib::Response& res, const TranscriptionResult& r, Format f, bool language_only, const Tokenizer* logprobs_of) {
    res.status = 200;
    if (f == Format::Text) {
        res.set_content(r.text + "\n", "text/plain; charset=utf-8");
        return;
    }
    if (f == Format::Srt || f == Format::Vtt) {
        res.set_content(f == Format::Srt ? to_srt(r.segments) : to_vtt(r.segments),
                        f == Format::Srt ? "application/x-subrip; charset=utf-8" : "text/vtt; charset=utf-8");
        return;
    }
    json j;
    if (f == Format::Json) {
        j = {{"text", r.text}};
        if (language_only) // the answer is the language
            j["language"] = lower(r.language), j["language_probability"] = r.language_probability;
    } else {
        json toks = json::array(), segs = json::array();
        for (const auto& t : r.tokens) toks.push_back({{"id", t.id}, {"logprob", t.logprob}});
        for (size_t i = 0; i < r.segments.size(); ++i) { // OpenAI's segment fields that qasr has, + language
            const Segment& s = r.segments[i];
            json ids = json::array();
            double lp = 0;
            for (size_t k = s.first_token; k < s.first_token + s.n_tokens && k < r.tokens.size(); ++k)
                ids.push_back(r.tokens[k].id), lp += r.tokens[k].logprob;
            segs.push_back({{"id", i}, {"start", s.start}, {"end", s.end}, {"text", s.text}, {"tokens", ids},
                            {"avg_logprob", s.n_tokens ? lp / double(s.n_tokens) : 0.0},
                            {"language", lower(s.language)}});
        }
        j = {{"task", "transcribe"},
             {"language", lower(r.language)},
             {"language_probability", r.language_probability},
             {"duration", r.audio_seconds},
             {"text", r.text},
             {"raw_text", r.raw_text},
             {"finish_reason", finish_reason_name(r.finish)},
             {"segments", segs},
             {"tokens", toks},
             {"rtf", r.rtf},
             {"timings_ms",
              {{"mel", r.timings.mel_ms}, {"encode", r.timings.encode_ms}, {"prefill", r.timings.prefill_ms},
               {"decode", r.timings.decode_ms}}}};
        if (!r.words.empty()) j["words"] = words_json(r.words); // OpenAI's word objects
    }
    if (logprobs_of) j["logprobs"] = transcript_logprobs(r, *logprobs_of);
    res.set_content(json_text(j) + "\n", "application/json");
}

void Metrics::request(const std::string& route, int status, double seconds, double audio_seconds) {
    std::lock_guard<std::mutex> lk(m_);
    ++count_[{route, status}];
    if (route != "transcriptions" || status != 200) return;
    ++n_;
    sum_ += seconds;
    audio_ += audio_seconds;
    for (size_t i = 0; i < std::size(kBuckets); ++i)
        if (seconds <= kBuckets[i]) ++hist_[i];
}

std::string Metrics::text(const json& gauges) const {
    std::lock_guard<std::mutex> lk(m_);
    std::string o = "# HELP qasr_requests_total Requests answered, by route and HTTP status.\n"
                    "# TYPE qasr_requests_total counter\n";
    char b[256];
    for (const auto& [k, v] : count_) {
        std::snprintf(b, sizeof b, "qasr_requests_total{route=\"%s\",status=\"%d\"} %llu\n", k.first.c_str(), k.second,
                      static_cast<unsigned long long>(v));
        o += b;
    }
    o += "# HELP qasr_transcription_seconds Time to answer a successful transcription request.\n"
         "# TYPE qasr_transcription_seconds histogram\n";
    for (size_t i = 0; i < std::size(kBuckets); ++i) {
        std::snprintf(b, sizeof b, "qasr_transcription_seconds_bucket{le=\"%g\"} %llu\n", kBuckets[i],
                      static_cast<unsigned long long>(hist_[i]));
        o += b;
    }
    std::snprintf(b, sizeof b,
                  "qasr_transcription_seconds_bucket{le=\"+Inf\"} %llu\nqasr_transcription_seconds_sum %.6f\n"
                  "qasr_transcription_seconds_count %llu\n",
                  static_cast<unsigned long long>(n_), sum_, static_cast<unsigned long long>(n_));
    o += b;
    std::snprintf(b, sizeof b,
                  "# HELP qasr_audio_seconds_total Audio transcribed by successful requests.\n"
                  "# TYPE qasr_audio_seconds_total counter\nqasr_audio_seconds_total %.3f\n",
                  audio_);
    o += b;
    for (const auto& [k, v] : gauges.items()) {
        if (!v.is_number()) continue;
        o += "# TYPE qasr_" + k + " gauge\nqasr_" + k + " " + v.dump() + "\n";
    }
    return o;
}

} // namespace qasr::cli::http
