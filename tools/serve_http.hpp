// `qasr serve`'s HTTP vocabulary shared by its routes (serve.cpp: transcriptions; serve_streams.cpp: live streams):
// client errors as exceptions with their status, the admission gate, request fields → options, result → response.
#pragma once
#include "commands.hpp"
#include "serve.hpp"
#include "qasr/qasr.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

namespace qasr {
class Tokenizer;
}

namespace qasr::cli::http {

// A request the client got wrong (or a refusal): status and message go back as they are.
struct HttpError : std::runtime_error {
    HttpError(int s, const std::string& m, const char* t = "invalid_request_error") : std::runtime_error(m), status(s), type(t) {}
    int status;
    const char* type;
};

// At most `parallel` holders at once; up to `max_queue` more wait; enter() refuses beyond that (→ 503).
class Admission {
public:
    Admission(int parallel, int max_queue) : parallel_(parallel), max_queue_(max_queue) {}
    bool enter();
    void leave();
    nlohmann::json state() const;

private:
    mutable std::mutex m_;
    std::condition_variable cv_;
    int running_ = 0, waiting_ = 0;
    const int parallel_, max_queue_;
};

// enter() or a 503 HttpError; leave() when destroyed.
class AdmissionSlot {
public:
    AdmissionSlot(Admission& a, int parallel, int max_queue);
    ~AdmissionSlot() { a_.leave(); }
    AdmissionSlot(const AdmissionSlot&) = delete;
    AdmissionSlot& operator=(const AdmissionSlot&) = delete;

private:
    Admission& a_;
};

// {"error": {"message", "type", "code"}} with the status.
void send_error(httplib::Response& res, int status, const std::string& msg, const char* type);

// The answer to audio sent as application/x-www-form-urlencoded (what `curl --data-binary` sends by default).
inline constexpr const char* kFormEncodedAudio =
    "send the audio as multipart/form-data (field 'file', curl -F file=@a.wav) or as the raw request body with its "
    "type (curl --data-binary @a.wav -H 'Content-Type: audio/wav'), not as application/x-www-form-urlencoded";

// The request's audio and fields: multipart/form-data (part `file` is the audio, the others are fields), or the raw
// body with the fields as query parameters (form fields win).
struct Upload {
    const std::string* audio = nullptr;
    std::string name = "upload";
    std::map<std::string, std::string> fields;
};
Upload read_upload(const httplib::Request& req, bool need_audio = true);

enum class Format { Json, Text, VerboseJson, Srt, Vtt };

struct Fields {
    TranscribeOptions opts;
    Format format = Format::Json;
    bool words = false; // timestamp_granularities[] has "word": the server's aligner times the transcript's words
    bool stream = false; // stream=true: server-sent events transcript.text.delta … transcript.text.done (serve.cpp)
    bool logprobs = false; // include[]=logprobs (OpenAI): the transcript's tokens with their log-probabilities
};
// OpenAI's fields (language, prompt, response_format, temperature, stream) and qasr's (itn, max_new_tokens, top_p, seed,
// ignore_eos, context, segment_seconds, language_only, beam_size, length_penalty); unknown fields are ignored (e.g. `model`),
// include[] takes "logprobs" (json and verbose_json; with stream=true on the transcript.text.done event). response_format srt and vtt
// segment the audio (segment_seconds, 10 unless given).
// Starts from the server's defaults (ServeOptions::defaults); a prompt/context field over o.max_prompt_bytes and a
// max_new_tokens over o.max_new_tokens (when set) are 400s.
Fields parse_fields(const std::map<std::string, std::string>& f, const ServeOptions& o);
bool to_bool(const std::string& field, const std::string& v);
double to_number(const std::string& field, const std::string& v, double lo, double hi);

// TranscribeOptions::abort for a request: true once its client has closed the connection (an orderly close or a
// reset; a request pipelined behind it is not a close), so that a transcription nobody waits for stops within a
// decode step. cpp-httplib 0.11 does not hand handlers their socket: it is found among this process's descriptors
// (/proc/self/fd) by the connection's two ends; where none matches, an empty function (the transcription runs to its
// end). A half-closed connection counts as closed, as nginx and Go's net/http count it. Polls at most every 50 ms.
std::function<bool()> client_gone(const httplib::Request& req);

// The answer in format f. logprobs_of (include[]=logprobs, json and verbose_json): a "logprobs" array as OpenAI's,
// {"token", "logprob", "bytes"} for each token of the transcript (the model's text before ITN: not its language tag,
// not <asr_text> or the end token), the tokens' bytes from this tokenizer.
void respond(httplib::Response& res, const TranscriptionResult& r, Format f, bool language_only = false,
             const Tokenizer* logprobs_of = nullptr);
// That "logprobs" array alone (respond's, and stream=true's transcript.text.done event's).
nlohmann::json transcript_logprobs(const TranscriptionResult& r, const Tokenizer& tok);
// A transcript.text.delta event's "logprobs": its tokens (TranscribeOptions::on_text_tokens), special ones left out.
nlohmann::json delta_logprobs(const std::vector<TokenInfo>& tokens, const Tokenizer& tok);

// Runs `body`, turning every exception into its status and JSON error (HttpError: its own; qasr::OutOfMemory and
// std::bad_alloc: 503; qasr::Cancelled: 499, nginx's "client closed request"; qasr::Error from "[options]": 400;
// anything else: 500). Returns the message, or "" on success.
std::string guarded(httplib::Response& res, const std::function<void()>& body);

// GET /metrics in Prometheus's text format: requests by route and status, the transcriptions' latency histogram and
// audio seconds, and the gauges the caller passes (running, waiting, open streams).
class Metrics {
public:
    void request(const std::string& route, int status, double seconds, double audio_seconds);
    std::string text(const nlohmann::json& gauges) const;

private:
    static constexpr double kBuckets[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
    mutable std::mutex m_;
    std::map<std::pair<std::string, int>, uint64_t> count_;
    uint64_t hist_[sizeof(kBuckets) / sizeof(kBuckets[0])] = {};
    uint64_t n_ = 0;
    double sum_ = 0, audio_ = 0;
};

} // namespace qasr::cli::http
