// qasr — Qwen3-ASR speech recognition. The C++ API.
//
//   auto asr = qasr::Transcriber::load_with_warmup("models/demo");
//   auto r = asr.transcribe_file("samples/demo_en.wav");
//   std::cout << r.text << " (RTF " << r.rtf << ")\n";
//
// A Transcriber holds an immutable loaded model; transcribe* calls may run concurrently from several threads
// (each call has its own session state). Every failure is a qasr::Error (a std::runtime_error; error.hpp).
#pragma once
#include "error.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace qasr {

struct DecodeOptions {
    int max_new_tokens = 0;    // 0: automatic cap ⌈seconds·20⌉ + 64
    bool ignore_eos = false;   // decode exactly max_new_tokens plain-argmax tokens, no stop rule at all
    float temperature = 0.0f;  // 0: greedy
    float top_p = 1.0f;        // nucleus sampling when temperature > 0
    uint64_t seed = 0;         // sampling seed
    int repetition_limit = 10; // stop when one token would repeat more often than this in a row (0: off)
    // > 1: beam search over this many hypotheses (≤ 16), as transformers' generate(num_beams=N) with its defaults
    // (early_stopping=False): the finished hypothesis with the best Σ log p / length^length_penalty wins. Greedy
    // only (temperature 0); not with ignore_eos, language_only or streams.
    int beam_size = 1;
    float length_penalty = 1.0f; // beam search: the exponent of the length that divides a hypothesis' score
};

// A stretch of the transcript with its time in the audio. Without TranscribeOptions::segment_seconds there is one
// segment per transcribed piece (one for audio up to max_piece_seconds); a stream's final result has one per stream
// segment (StreamOptions::max_segment_windows), with no tokens listed.
struct Segment {
    double start = 0, end = 0;  // seconds: the first and last 10 ms frame of the piece above the quiet level
                                // (the whole piece when none is)
    std::string text, language; // the piece's transcript (ITN applied unless disabled) and language
    size_t first_token = 0, n_tokens = 0; // its generated tokens in TranscriptionResult::tokens
};

struct TokenInfo {
    int id;
    float logprob; // log-probability under the model (temperature 1)
};

struct TranscribeOptions {
    std::string language;      // "" or "auto" = detect; else a supported name or ISO code ("English", "en")
    std::string context;       // system-prompt context (names, terms)
    DecodeOptions decode;
    bool itn = true;           // inverse text normalization of the final text (English, Chinese)
    size_t min_samples = 8000; // zero-pad shorter clips (the reference feature extractor does)
    double max_piece_seconds = 1200; // longer audio is split at quiet points and transcribed piece by piece
    // > 0: segment timestamps (subtitles). The audio is cut at pauses into pieces of at most this many seconds
    // (2 ..= max_piece_seconds), each transcribed on its own; pieces without speech (every 10 ms frame 35 dB under
    // the loudest, or under -60 dBFS) are skipped; the texts are joined with a space except between scripts written
    // without spaces. A cut can fall inside a word where the span holds no pause, and pieces do not share context:
    // 0 (default) transcribes the audio whole, as the reference does.
    double segment_seconds = 0;
    // Called on the calling thread with each segment as soon as its piece is transcribed (before transcribe*
    // returns): a long file's segments can be shown while the rest is still being transcribed.
    std::function<void(const Segment&)> on_segment;
    // The transcript's text as the model writes it, in deltas (a token's worth, whole UTF-8 characters): they
    // concatenate to the text before the final clean-up — the reference's repetition fix and inverse text
    // normalization, which TranscriptionResult::text has. A file of several pieces: each piece's deltas in order,
    // joined as its segments' texts are (pieces run at once with max_batch > 1 are passed on as each is taken in
    // order). Called on the thread that decodes (the caller's, or the engine's with LoadOptions::max_batch > 1);
    // beam search passes its text when the search ends; language_only has none.
    std::function<void(const std::string& delta)> on_text;
    // on_text with each delta's tokens: those decoded since the previous delta (the ones whose text it completes,
    // whitespace held back with it included; not the language tag or <asr_text>), with their log-probabilities — a
    // delta's confidence, as OpenAI's streamed logprobs. Same deltas, threads and order as on_text; either or both
    // may be set. Tokens of trailing whitespace, which no delta gives, are in TranscriptionResult::tokens alone; an
    // output ending inside a UTF-8 character gets a last delta (its replacement character) without tokens.
    std::function<void(const std::string& delta, const std::vector<TokenInfo>& tokens)> on_text_tokens;
    // Cancellation (a GUI's stop button, a server whose client went away): asked before each stage, between the
    // encoder's and the decoder's layers of a pass on the CPU (on a GPU between stages) and before every decode
    // step. Once it returns true the transcription stops within a step or a layer and transcribe* throws
    // qasr::Cancelled; segments already given to on_segment stay given, and the Transcriber stays usable. It may be
    // called from another thread than the caller's (with LoadOptions::max_batch > 1, the engine's) and often (every
    // token): make it cheap and thread-safe, e.g. an std::atomic<bool>'s load.
    std::function<bool()> abort;
    // Progress for a progress bar: a fraction of the call's work, 0 first, then non-decreasing values as it grows by
    // at least 0.005, and 1 exactly once, when the transcript is complete (not after a failure or cancellation).
    // An estimate: a file's pieces count by their audio seconds; within a piece the stages before the decode report
    // as their passes go (a CPU pass between its layers), and the decode by its time per step and the steps
    // expected from the piece's length (4 tokens a second), so the fraction can pause near 0.9 when a transcript
    // runs longer than that. Called on the thread that decodes (as on_text); pieces run at once (max_batch > 1)
    // report as each is taken.
    std::function<void(float fraction)> on_progress;
    // Language identification only: decoding stops once the model has written its language tag ("language X"),
    // a few steps after the prefill; the result has the language and an empty text, and language_probability
    // tells how sure the model was. Needs language == "" (detection).
    bool language_only = false;
    // A part of the audio only: from offset_seconds, for duration_seconds (0: to the end). Times in the result
    // (segments, words) stay those of the whole audio; audio_seconds is the part's. An offset at or past the end
    // of the audio is an error.
    double offset_seconds = 0;
    double duration_seconds = 0;
};

struct LoadOptions {
    int threads = 0;           // 0: all cores
    std::string device = "cpu"; // "cpu", "cuda" or "cuda:N" (the CUDA backend, when built with it)
    // > 1 makes concurrent transcribe* calls decode together, up to this many requests per step (one engine thread
    // runs the steps; each step streams the weights once for the whole batch). CPU: the engine thread runs every
    // stage with all cores, and a transcript is bit for bit the same either way. GPU (greedy requests; up to 128
    // rows): each request's encoder and prefill run on its calling thread, only the steps are batched; a token can
    // differ from the unbatched one where its two best logits are within rounding of each other. 1: every call
    // decodes on its own.
    int max_batch = 1;
    // The CPU's matrix-matrix products (encoder, prefill, stream steps): "auto" rounds activations and weights to
    // bf16 for quantized checkpoints (already approximations) and keeps float32 for float ones (the reference's
    // arithmetic); "bf16" rounds for every checkpoint (about half the encoder and prefill time on CPUs with AMX or
    // AVX512-BF16, at bf16's precision); "f32" keeps float32 for every checkpoint. Decode steps and the GPU backend
    // are not affected.
    std::string compute = "auto";
};

enum class FinishReason { Eos, TokenCap, Repetition, Empty };
const char* finish_reason_name(FinishReason r);

struct Timings {
    double load_ms = 0, mel_ms = 0, encode_ms = 0, prefill_ms = 0, decode_ms = 0;
    double total_ms() const { return mel_ms + encode_ms + prefill_ms + decode_ms; }
};

// A word of a transcript with its time in the audio, from the forced aligner (Aligner).
struct AlignedWord {
    std::string text;          // the word as the aligner saw it: punctuation removed, a CJK character on its own
    double start = 0, end = 0; // seconds (whole milliseconds)
};

struct TranscriptionResult {
    std::string text;      // parsed, repetition-fixed, ITN applied (unless disabled)
    std::string language;  // detected or forced language name; "" when none
    std::string raw_text;  // decoded model output, special tokens skipped, before parsing
    std::vector<TokenInfo> tokens; // generated ids (including a final EOS)
    int n_prompt_tokens = 0;
    int n_audio_tokens = 0;
    double audio_seconds = 0;
    double rtf = 0;        // the transcription's wall time / audio seconds (one piece: mel + encode + prefill + decode)
    Timings timings;       // a file of several pieces: sums over its pieces (they overlap where max_batch > 1)
    FinishReason finish = FinishReason::Empty;
    std::vector<Segment> segments; // pieces with a non-empty text, in order
    // The probability the model gave its language tag: exp of the summed log-probabilities of the tokens before
    // its <asr_text> ("language", " English"); 0 where it wrote none (a forced language, an empty result). A file of
    // several pieces: the lowest of its pieces'.
    double language_probability = 0;
    std::vector<AlignedWord> words; // word timestamps: empty unless an Aligner added them (Aligner::add_words)
};

// Live transcription (see Stream below).
struct StreamOptions {
    std::string language;            // "" = detect
    std::string context;
    double chunk_seconds = 2.0;      // decoding cadence
    int unfixed_chunks = 2;          // first chunks of a segment decode without a text prefix
    int rollback_tokens = 5;         // tokens of the previous hypothesis re-decoded each chunk
    int max_segment_windows = 3;     // segment length bound (× 8 s)
    int max_new_tokens_per_chunk = 0; // 0: ⌈chunk seconds·20⌉ + 32
    bool exact_final = false;        // final decode without the text prefix: equals offline, costs a full decode
    bool speculative = true;         // verify the previous hypothesis as a draft in the prefill pass (greedy-exact);
                                     // the final then decodes without a text prefix, like offline
    double pause_seconds = 0;        // > 0: a quiet stretch this long after speech triggers an extra step that
                                     // decodes all audio so far like the final (0.3 is a good value; 0: off)
    bool endpoint_final = false;     // approximate: when only quiet audio followed the last pause step, finish()
                                     // returns that step's transcript without decoding the quiet tail
    double emulate_tokens_per_second = 0; // benchmarks with random weights: cap hypotheses at ⌈rate·s⌉+4 tokens
    bool itn = true;
    bool logprobs = false;           // the final result lists its tokens with log-probabilities and the language
                                     // tag's probability, as offline results do; costs a pass over the LM head for
                                     // the rows of each verified draft in whole-audio decodes (final, pause steps)
};

struct StreamEvent {
    enum class Kind { Partial, Final } kind;
    std::string stable;   // text later partials keep (committed segments + fixed prefix; a pause step, which
                          // decodes afresh, keeps it where it agrees, else starts over). The final decodes the
                          // utterance afresh, as offline, and can differ from it where the model changes its mind;
                          // with StreamOptions::speculative and exact_final off it continues after the fixed prefix
                          // and keeps it (an app that types stable text at once), and can then differ from offline
    std::string unstable; // tail that may still change
    std::string language;
    double audio_seconds = 0;
    std::string text() const { return stable + unstable; }
};

// Segment output: SubRip ("1\n00:00:00,000 --> 00:00:02,690\ntext\n", cues separated by blank lines), WebVTT
// ("WEBVTT" header, markup characters escaped) and "[00:00:00.000 --> 00:00:02.690]  text" lines. Line breaks in
// a text become spaces.
// first_index numbers the first SubRip cue and header=false leaves out the WebVTT header, so that segments can be
// written one by one as they arrive (TranscribeOptions::on_segment) with the same result. A cue's text is broken
// into lines of at most line_width columns (at spaces and between CJK characters, which count two; 0: one line).
std::string to_srt(const std::vector<Segment>& segments, int first_index = 1, int line_width = 42);
std::string to_vtt(const std::vector<Segment>& segments, bool header = true, int line_width = 42);
std::string to_timestamped_text(const std::vector<Segment>& segments);

// The library's version, what this build has (CUDA, FFmpeg, OpenBLAS) and what it finds on this machine (CPU
// kernels, bf16 engine, threads, CUDA devices), as lines for a bug report (`qasr version`).
std::string system_info();

// One fixed, machine-parsable summary line shared by the CLI and `qasr bench`.
std::string summary_line(const TranscriptionResult& r);

// Diagnostics (load and warm-up stage times, fallbacks, warnings) go to one process-wide sink, called from
// whichever thread logs (calls are serialized). The default sink writes warnings and errors to stderr;
// nullptr restores it.
enum class LogLevel { Debug = 0, Info = 1, Warn = 2, Error = 3 };
using LogSink = std::function<void(LogLevel, const std::string&)>;
void set_log_sink(LogSink sink);

struct AlignOptions {
    size_t min_samples = 8000; // zero-pad shorter audio (as TranscribeOptions::min_samples)
};

struct Alignment {
    std::vector<AlignedWord> words; // in text order; times non-decreasing
    std::vector<int> classes;       // the aligner's raw class per <timestamp> (start₀, end₀, start₁, …), unrepaired
    int n_tokens = 0;               // the aligner's input length (audio rows + words + timestamp markers)
    double audio_seconds = 0;
    double rtf = 0;
    Timings timings; // mel, encode, prefill (the aligner's one pass); load_ms
};

// Word timestamps with Qwen3-ForcedAligner: given audio and its transcript, the time of every word. A forced
// aligner does not transcribe; pair it with a Transcriber (add_words) or give it a known text (align).
//
//   auto al = qasr::Aligner::load("models/Qwen3-ForcedAligner-0.6B");
//   for (auto& w : al.align_file("a.wav", "Hello world.").words) std::cout << w.text << " " << w.start << "\n";
//
// Words: whitespace-separated runs of letters, digits and apostrophes; every CJK character is a word of its own;
// other characters are dropped. One call aligns at most the classes' span (5000 × 80 ms = 400 s; the reference
// toolkit uses ≤ 180 s). Thread-safe like Transcriber.
class Aligner {
public:
    // The longest piece a transcription aligned with add_words() should have (the reference toolkit's limit): the
    // CLI, the server and the C API set TranscribeOptions::max_piece_seconds to it when they align.
    static constexpr double max_piece_seconds = 180;
    static Aligner load(const std::string& model_dir, const LoadOptions& opts = {}); // threads, device, compute
    Alignment align(const std::vector<float>& samples, const std::string& text, const AlignOptions& opts = {}) const;
    Alignment align_file(const std::string& path, const std::string& text, const AlignOptions& opts = {}) const;
    // Fills r.words: each segment's text aligned with its stretch of `samples` (the samples r was transcribed from),
    // times in the whole audio. A segment longer than the aligner's span is an error (transcribe with
    // TranscribeOptions::max_piece_seconds ≤ 180 or segment_seconds).
    void add_words(const std::vector<float>& samples, TranscriptionResult& r, const AlignOptions& opts = {}) const;
    double load_ms() const;
    std::string model_summary() const;

    Aligner(Aligner&&) noexcept;
    Aligner& operator=(Aligner&&) noexcept;
    ~Aligner();
    struct Impl;

private:
    explicit Aligner(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

class StreamSession;
class Transcriber;

// A live transcription session: push 16 kHz mono PCM in blocks of any size at any pace; partial and final text
// arrive through the callback and poll(); finish() flushes the tail and returns the final result. Sessions are
// independent and may run concurrently on one Transcriber.
class Stream {
public:
    using Callback = std::function<void(const StreamEvent&)>;
    void push(const float* samples, size_t n);
    void push_s16le(const uint8_t* bytes, size_t n);
    std::vector<StreamEvent> poll();
    // The final result: text, language, segments (one per stream segment), audio_seconds; raw_text is the text
    // before ITN; `finish` how the last segment's decode ended (Empty when the text is). With
    // StreamOptions::logprobs also `tokens` (each segment's, which its Segment indexes) and language_probability
    // (the lowest of the segments'); without it they stay empty and 0 (the steps then take argmaxes only).
    TranscriptionResult finish();
    // Thread-safe, also while push() runs on another thread: the chunk step in progress stops at its next stage
    // boundary and no further steps run, so a following finish() starts its final at once (push-to-talk: call it
    // when the key is released, then finish() once push() has returned). The final transcript does not change.
    void interrupt();
    // Seconds of quiet since the last speech in the pushed audio (100 ms blocks at least 30 dB under the loudest so
    // far, or under −70 dBFS); 0 before any speech and while it lasts. Hands-free dictation: finish() once it
    // passes a threshold (e.g. 1 s), then open the next stream.
    double trailing_quiet_seconds() const;
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;
    ~Stream();

private:
    friend class Transcriber;
    explicit Stream(std::unique_ptr<StreamSession> s);
    std::unique_ptr<StreamSession> s_;
};

class Transcriber {
public:
    static Transcriber load(const std::string& model_dir, const LoadOptions& opts = {});
    // load() + a short warm-up transcription of low-amplitude noise, so the first real request is not cold.
    static Transcriber load_with_warmup(const std::string& model_dir, const LoadOptions& opts = {});

    TranscriptionResult transcribe_file(const std::string& path, const TranscribeOptions& opts = {}) const;
    // An encoded audio file held in memory (any format transcribe_file accepts: WAV, and with FFmpeg mp3, flac,
    // ogg/opus, m4a, webm ...), e.g. an upload.
    TranscriptionResult transcribe_memory(const void* data, size_t size, const TranscribeOptions& opts = {}) const;
    // 16 kHz mono float samples in [-1, 1].
    TranscriptionResult transcribe(const std::vector<float>& samples, const TranscribeOptions& opts = {}) const;
    void warmup() const;
    Stream open_stream(const StreamOptions& opts = {}, Stream::Callback cb = nullptr) const;

    double load_ms() const;
    std::string model_summary() const;

    Transcriber(Transcriber&&) noexcept;
    Transcriber& operator=(Transcriber&&) noexcept;
    ~Transcriber();

    struct Impl;
    const Impl& impl() const { return *impl_; } // for in-tree tools (bench, streaming)

private:
    explicit Transcriber(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

} // namespace qasr
