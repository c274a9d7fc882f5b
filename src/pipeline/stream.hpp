// StreamSession: incremental transcription for live dictation (push PCM at any pace and block size, receive
// partial and final text). Cost per chunk is bounded independently of the stream length:
//  - the log-mel is computed only for frames whose samples changed;
//  - encoder rows of completed 8-second attention windows are reused (recomputed only if the clip-max clamp
//    floor moved above one of their values, which keeps them exact, spec §4.6);
//  - in the open window, the conv-stem rows of each completed 100-frame chunk are kept (the stem is per chunk,
//    spec §4.1–4.4; same exactness rule); push() computes them as soon as a chunk's 100 frames are final, between
//    steps, so a step (and finish()) runs the stem only on the chunk holding its provisional last frames, then the
//    Transformer layers;
//  - the decoder keeps the KV cache of the unchanged prompt prefix (system part + completed windows) and
//    re-runs only the tail: the open window's rows, the prompt suffix and the rolled-back text prefix;
//  - the previous hypothesis after the prefix is verified as a draft in the same prefill pass (speculative): the
//    accepted tokens cost no single-token decoder step; the final decodes without a forced prefix this way;
//  - where the hypothesis leaves that draft, a sequential pass also verifies a prompt-lookup draft (the previous
//    hypothesis after the last tokens generated, or a repetition of them), so a run of predictable tokens costs
//    one pass instead of one pass per token; tokens are kept only where greedy argmax reproduces them;
//  - audio is processed in segments of at most `max_segment_windows` windows; a full segment is finalized at a
//    window boundary and its text committed (the encoder output stays exact across the cut).
// Chunk steps (and pause checks) happen at fixed sample counts, so results do not depend on how the PCM was split
// into pushes.
#pragma once
#include "model/decoder.hpp"
#include "pipeline/stream_engine.hpp"
#include "model/model.hpp"
#include "qasr/qasr.hpp"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace qasr {

struct StreamChunkStats {
    double audio_seconds = 0;   // stream position when the chunk step ran
    int encoder_windows = 0;    // windows encoded in this step
    int encoder_frames = 0;     // mel frames fed to the encoder
    int stem_chunks = 0;        // conv-stem chunks (100 frames) computed in this step; cached ones not counted
    int early_stem_chunks = 0;  // conv-stem chunks computed by push() since the previous step (final frames only)
    double early_ms = 0;        // time push() spent on them (log-mel of their frames + stem), not part of ms
    int mel_frames = 0;         // mel frames (re)computed
    int prefilled_tokens = 0;   // decoder positions run in prefill (after KV reuse)
    int generated_tokens = 0;
    int draft_tokens = 0;       // previous-hypothesis tokens verified in the prefill pass
    int accepted_tokens = 0;    // of those, reproduced by greedy argmax (no sequential step needed)
    int decode_steps = 0;       // sequential decoder passes (one token, plus any lookup draft after it)
    int lookup_tokens = 0;      // prompt-lookup draft tokens verified in those passes
    int lookup_accepted = 0;    // of those, reproduced by greedy argmax
    bool pause = false;         // an extra step triggered by a pause after speech
    bool interrupted = false;   // interrupt() stopped it early: before or inside its prefill (prefilled_tokens
                                // 0: the decoder's cache is as before the step) or between decode passes
    double ms = 0;
    double mel_ms = 0, encoder_ms = 0, prefill_ms = 0, decode_ms = 0; // breakdown of ms
};

class StreamSession {
public:
    using Callback = std::function<void(const StreamEvent&)>;
    StreamSession(std::shared_ptr<const Model> model, StreamOptions opts, Callback cb = nullptr);

    void push(const float* pcm, size_t n);      // mono 16 kHz float samples
    void push_s16le(const uint8_t* bytes, size_t n);
    std::vector<StreamEvent> poll();            // events since the last poll (also delivered to the callback)
    TranscriptionResult finish();               // flushes the tail, returns the final result; the session ends
    // Thread-safe; may be called while push() runs on another thread (push-to-talk: the key was released). The
    // chunk step in progress stops at its next layer or stage boundary (the open window's encoder layers, the
    // decoder layers of its prefill and decode passes; device passes run to their end) and no later chunk or
    // pause step starts: push() only appends audio from then on, so finish() can begin its final almost at once
    // instead of waiting for a step of the whole segment. The final is the same (its draft is only the older
    // hypothesis).
    void interrupt() { interrupted_.store(true, std::memory_order_relaxed); }
    // Seconds of quiet since the last speech (100 ms blocks at least 30 dB under the loudest so far, or under
    // −70 dBFS); 0 before any speech and while it lasts. Hands-free dictation ends an utterance on it.
    double trailing_quiet_seconds() const;
    const std::vector<StreamChunkStats>& stats() const { return stats_; }
    bool endpoint_used() const { return endpoint_used_; } // finish() took the pause step's transcript (no step)

private:
    void step(bool final, bool pause = false);
    bool check_pause(); // at each 100 ms of segment samples; returns whether a pause step ran
    void early_stem();  // when the next open-window chunk's frames are all final: its log-mel and conv stem
    void plan_early_stem();
    Tensor stem_of(const std::vector<float>& lm, size_t frames, float clip_max) const; // lm: [n_mels, frames]
    void end_segment(size_t keep_from);
    void emit(StreamEvent::Kind kind, const std::string& stable, const std::string& unstable);
    // How a whole-audio decode (a final or pause step) ended, and its tokens with their log-probabilities (with
    // StreamOptions::logprobs; the offline result's `tokens`: the generated ids and a closing EOS).
    struct Ending {
        std::vector<TokenInfo> tokens;
        FinishReason reason = FinishReason::TokenCap;
    };
    // Commits a finished segment: final_.segments gets audio_[0, n) (it starts at consumed_seconds_) with its parsed
    // text, final_.tokens the ending's tokens (the segment indexes them), final_ the language tag's probability.
    void commit_segment(size_t n, const std::string& text, const Ending& e);
    // Log-probabilities of `ids` at rows r0 … of the last decoder pass (the engine's full logits).
    std::vector<float> logprobs_at(int64_t r0, const std::vector<int>& ids);
    std::vector<int> rollback_prefix(bool final) const;
    int emulated_length(double seconds) const;

    std::shared_ptr<const Model> model_;
    StreamOptions opts_;
    Callback cb_;
    std::unique_ptr<StreamEngine> engine_; // encoder layers + decoder with its KV cache (CPU or the model's device)
    std::string forced_;             // canonical forced language or ""
    size_t chunk_samples_;
    bool finished_ = false;
    std::atomic<bool> interrupted_{false};
    bool interrupted() const { return interrupted_.load(std::memory_order_relaxed); }

    // Current segment.
    std::vector<float> audio_;       // samples of the segment
    size_t next_step_at_;            // segment sample count that triggers the next chunk step
    int chunk_index_ = 0;
    std::vector<float> logmel_;      // unclamped log10 mel, frame-major blocks [frame][n_mels]
    size_t stable_frames_ = 0;       // frames whose samples are all final
    float max_stable_ = -1e30f;
    std::vector<Tensor> windows_;    // encoder rows of completed windows
    std::vector<float> window_min_;  // min unclamped log-mel value inside each completed window
    std::vector<Tensor> stem_;       // conv-stem rows of the completed chunks from stem_from_ on, in order
    std::vector<float> stem_min_;    // min unclamped log-mel value inside each of those chunks
    std::vector<float> stem_floor_;  // clamp floor each of them was computed with
    size_t stem_from_ = 0;           // first frame of the open window (stem_[0] is its first chunk)
    size_t next_stem_at_ = 0;        // segment sample count at which push() runs early_stem() (0: none planned)
    int early_chunks_ = 0;           // early_stem() work since the last step, for its stats
    double early_ms_ = 0;
    float floor_used_ = -1e30f;      // clamp floor the completed windows and stem_ were computed with
    std::vector<int> cached_ids_;    // input ids behind the cache rows (audio rows: pad id)
    size_t cached_audio_rows_ = 0;   // audio rows in the cache that came from completed windows
    std::vector<int> hyp_;           // last generated ids of the segment (without EOS)
    size_t prefix_len_ = 0;          // hyp_'s first ids that its step forced (the stable text's): later prefixes
                                     // keep at least these, so stable text does not shrink
    std::string stable_;             // stable text of the last partial (segment part)
    // Pause detection (on segment samples, at fixed 100 ms boundaries).
    size_t next_check_at_ = 1600;
    int pause_blocks_ = 0;           // quiet 100 ms blocks that make a pause (0: off)
    int quiet_blocks_ = 0;
    float peak_rms_ = 0;             // loudest 100 ms block of the stream
    bool speech_since_pause_ = false;
    bool heard_speech_ = false;      // any block above the quiet level so far
    int quiet_run_ = 0;              // quiet blocks since the last one above it (trailing_quiet_seconds)
    bool endpoint_ok_ = false;       // only quiet blocks since the last pause step
    std::vector<int> endpoint_hyp_;  // the last pause step's hypothesis
    Ending ending_;                  // of the last final or pause step (hyp_)
    Ending endpoint_ending_;         // of the last pause step (endpoint_hyp_)
    bool endpoint_used_ = false;

    // Whole stream.
    std::string committed_raw_text_; // parsed texts of finished segments, concatenated
    std::string language_;
    double consumed_seconds_ = 0;    // audio of finished segments
    std::vector<StreamEvent> pending_;
    std::vector<StreamChunkStats> stats_;
    TranscriptionResult final_;
    int committed_ = 0;              // segments committed (commit_segment calls)
};

} // namespace qasr
