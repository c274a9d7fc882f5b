// Session: the per-request state (KV cache, sampler) over a shared Model. Exposes the pipeline stages
// separately (mel → encode → prompt → prefill → step) for tests and tools, and run() with the guardrails.
// With a device model (Model::device) the stages run on the accelerator; taps need the CPU path.
#pragma once
#include "model/decoder.hpp"
#include "model/encoder.hpp"
#include "core/timer.hpp"
#include "model/model.hpp"
#include "pipeline/progress.hpp"
#include "qasr/qasr.hpp"
#include "text/text_deltas.hpp"

#include <memory>
#include <random>

namespace qasr {

class Session {
public:
    explicit Session(std::shared_ptr<const Model> model);

    Tensor mel(const std::vector<float>& audio, size_t min_samples) const;  // [n_mels, T]
    Tensor encode(const Tensor& mel, const TapFn* tap = nullptr) const;     // [A, D]
    // Samples → log-mel → encoder rows [A, D] (on the device where there is one); t.mel_ms / t.encode_ms get the times.
    Tensor encode_samples(const std::vector<float>& audio, size_t min_samples, Timings& t) const;
    Prompt prompt(int64_t n_audio, const TranscribeOptions& opts) const;
    // Clears the cache, embeds the prompt, fills the audio rows, runs the decoder. Returns logits of the last
    // position, or of all positions when all_logits.
    Tensor prefill(const Prompt& p, const Tensor& audio_rows, bool all_logits = false, const TapFn* tap = nullptr);
    Tensor step(int token); // logits [1, V] of the next position
    int64_t cache_len() const { return cache_.len; }
    int64_t cache_capacity() const { return cache_.cap; } // positions the KV arena has room for (CPU)
    // TranscribeOptions::abort of the request begun: throws qasr::Cancelled once it returns true. run() and the
    // phases below ask it before each stage and step; a CPU encoder or prefill pass asks it between layers.
    void check_abort() const;
    // A decode step of the request begun was taken (TranscribeOptions::on_progress); next_chosen() and run() count
    // their own, beam search calls it per step.
    void step_done() {
        if (st_.progress) st_.progress->token();
    }

    TranscriptionResult run(const std::vector<float>& audio, const TranscribeOptions& opts);

    // run() in phases, for an engine that steps several sessions together (pipeline/batch_engine.hpp). begin()
    // checks the options and runs everything up to the first token's logits; false: the result is complete already
    // (audio too short). next() chooses a token from the logits of the next position and applies the stop rules:
    // it returns the token to feed to the next step, or −1 when the transcript is complete. finish() returns it.
    // On an accelerator with greedy decoding, run() keeps the device's own loop (begin()/next() are for host steps).
    bool begin(const std::vector<float>& audio, const TranscribeOptions& opts);
    int next(const float* logits);
    // next() for a token chosen elsewhere (a device's batched step): the stop rules and the token cap.
    int next_chosen(int tok, float logprob);
    // On an accelerator with greedy decoding (device_greedy()), after begin(): the first token (the prefill's
    // choice) through next_chosen(), with room made in the device's KV cache for the rest; the later steps then
    // go through step_batch_device().
    bool device_greedy() const { return st_.device_greedy; }
    // Whether these options decode by argmax (greedy, or --ignore-eos's plain argmax): on a device, such a request
    // keeps its tokens on the device (device_greedy) and can join a DeviceBatch.
    static bool argmax_decoding(const DecodeOptions& d) {
        return (d.temperature <= 0.0f && d.beam_size <= 1) || d.ignore_eos;
    }
    // Beam search (pipeline/beam_search.hpp): this session's KV cache becomes src's (another session of the same
    // model); positions before `from` are taken to be equal already.
    void copy_state_from(Session& src, int64_t from);
    int begin_device_batch();
    // One greedy step of B device sessions together (DeviceBatch::step): ids/logprobs get each row's choice.
    static void step_batch_device(Session* const* s, const int* tokens, size_t B, DeviceBatch& batch, int* ids,
                                  float* logprobs);
    // One step of B device sessions together (DeviceBatch::step_top): ids/logprobs [B, k] get each row's k best
    // tokens and their log-probabilities, chosen on the device.
    static void step_top_device(Session* const* s, const int* tokens, size_t B, DeviceBatch& batch, int k, int* ids,
                                float* logprobs);
    const Tensor& first_logits() const { return st_.logits; }
    TranscriptionResult finish();
    // One decode step of B sessions of one model on the CPU, session b fed tokens[b]: logits [B, V], row b bit for
    // bit what s[b]->step(tokens[b]) returns (ops::decode_step_batch; the weights stream once for all B).
    static Tensor step_batch(Session* const* s, const int* tokens, size_t B);
    // DeviceSession::record_passes for this session's requests (the warm-up's are not worth recording).
    void record_device_passes(bool on) {
        if (accel_) accel_->record_passes(on);
    }

private:
    [[noreturn]] static void cancelled();
    // TranscribeOptions::abort and the request's progress in stage s as the model code's between-parts hook (empty:
    // neither is asked for)
    PassHook stop_hook(PieceProgress::Stage s) const;
    void stage_done(PieceProgress::Stage s) const {
        if (st_.progress) st_.progress->stage(s, 1.0);
    }
    // Host KV caches of `sessions` sessions of up to `positions` positions each must fit in the memory available
    // (core/memory.hpp): Linux would kill the process when an arena too large is touched rather than fail its
    // allocation. Throws OutOfMemory saying what to change. CPU sessions only.
    void check_kv_memory(int64_t positions, int sessions, const char* what) const;
    void decode_beams(); // after begin(): DecodeOptions::beam_size > 1 (beam_search.cpp)
    // The device sessions of B sessions of one device model, for a batched device step.
    static std::vector<DeviceSession*> device_rows(Session* const* s, size_t B);
    int choose(const float* logits, int64_t V, const DecodeOptions& d, float& logprob);
    bool accept(int tok, float lp, const DecodeOptions& d, std::vector<int>& out, int& run_len, TranscriptionResult& r) const;
    struct Pending { // the request between begin() and finish()
        TranscriptionResult r;
        DecodeOptions d, plain; // plain: d with ignore_eos decoding by plain argmax
        std::string forced;
        std::vector<int> out;
        int run_len = 0, cap = 0, n = 0;
        int64_t V = 0;
        int stop_id = -1; // TranscribeOptions::language_only: <asr_text> ends the decode
        std::function<bool()> abort; // TranscribeOptions::abort (empty: none)
        std::shared_ptr<TextDeltas> deltas; // TranscribeOptions::on_text/on_text_tokens (null: none)
        std::unique_ptr<PieceProgress> progress; // TranscribeOptions::on_progress (null: none)
        bool empty = false, device_greedy = false, itn = true;
        Tensor logits;
        Stopwatch sw;
    };
    std::shared_ptr<const Model> model_;
    Pending st_;
    std::unique_ptr<DeviceSession> accel_; // the model's accelerator session (null: CPU ops)
    Decoder decoder_;
    KvCache cache_;
    std::mt19937_64 rng_;
};

// Token-count cap for a clip (spec guardrail): ⌈seconds·20⌉ + 64.
int default_token_cap(double seconds);

} // namespace qasr
