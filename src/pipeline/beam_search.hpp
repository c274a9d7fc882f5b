// Beam search as transformers' generate(num_beams=N, do_sample=False) runs it with its defaults (early_stopping=False,
// length_penalty 1): each step keeps the K = max(2, 1 + #EOS ids)·N best continuations of the running beams by
// accumulated log-probability; the best N that did not stop run on, and those among the first N that stopped (an
// EOS, the token cap, or qasr's repetition rule) compete for the N finished places with score Σ log p / length^lp
// (length: the generated tokens, the stopping one included). The search ends when every continuation stops, or when
// all N places are taken and the best running beam's score over its current length cannot beat the worst of them.
// The arithmetic (float32 scores, −1e9 for excluded entries) follows the reference so that its choices are the
// same; docs/architecture.md, "Beam search".
//
// The decoder side is a BeamDecoder: the search only sees rows of logits. Session (beam_search.cpp) runs the
// beams as sessions whose KV caches are copied where a beam forks; tests drive the search with a table.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace qasr {

class BeamDecoder {
public:
    virtual ~BeamDecoder() = default;
    // The next step: beam b continues beam parent[b] of the previous step (its state, which forks where two beams
    // share a parent) fed tokens[b]. Returns row b's logits: n × vocabulary, row-major; or null where the decoder
    // chose each row's k best itself (a device), which top() then gives.
    virtual const float* advance(const std::vector<int>& parent, const std::vector<int>& tokens) = 0;
    // After an advance() that returned null: ids/logprobs [n, k] get each row's k best tokens (logit descending,
    // ties → lower id) and their log-softmax; k is BeamConfig's K capped at the vocabulary.
    virtual void top(int k, int64_t* ids, float* logprobs) {
        (void)k, (void)ids, (void)logprobs;
    }
};

struct BeamConfig {
    int beams = 4;
    float length_penalty = 1.0f;
    int max_new_tokens = 0;   // the cap: a continuation reaching it stops
    int repetition_limit = 10; // a continuation that repeats one id more often than this in a row stops (0: off)
    int n_eos = 2;            // how many ids stop (K = max(2, 1 + n_eos)·beams)
    std::function<bool(int)> is_eos;
};

struct BeamResult {
    std::vector<int> tokens;      // the generated tokens (an ending EOS included; a repetition's extra token not)
    std::vector<float> logprobs;  // each token's log-softmax
    float score = 0;              // Σ log p / length^length_penalty as the search ranked it
    enum class End { Eos, Cap, Repetition } end = End::Cap;
    int steps = 0;                // decoder steps run after the first logits
};

// K, the continuations a step keeps: max(2, 1 + #EOS ids) · beams (per row at most the vocabulary).
inline int beam_candidates(int beams, int n_eos) { return (n_eos + 1 > 2 ? n_eos + 1 : 2) * beams; }

// first: the logits [vocab] after the prompt (the prefill's last row).
BeamResult beam_search(const float* first, int64_t vocab, BeamDecoder& dec, const BeamConfig& c);

} // namespace qasr
