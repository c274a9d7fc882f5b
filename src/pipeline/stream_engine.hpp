// What a streaming session computes with, between chunk steps: the encoder's Transformer layers over packed
// conv-stem rows, and a decoder whose KV cache persists across steps (truncated to the reused prefix, extended by
// the rows that changed). The CPU engine runs the host ops (Decoder + KvCache); the device engine runs the same
// on an accelerator session (backend/device.hpp), whose KV cache and last hidden rows stay on the device.
#pragma once
#include "core/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace qasr {

struct Model;

class StreamEngine {
public:
    virtual ~StreamEngine() = default;
    // Conv stem of one chunk: normalized mel [n_mels, frames] → rows [A, d] (encode_stem_chunk, model/encoder.hpp).
    virtual Tensor stem(const Tensor& mel) = 0;
    // Transformer layers, ln_post and projector over packed stem rows x [A, d] (encode_rows, model/encoder.hpp).
    // The CPU engine asks `stop` between layers (empty result when it returned true); a device pass runs to its end.
    virtual Tensor encode_rows(Tensor x, int64_t window_rows, const std::function<bool()>& stop) = 0;
    virtual int64_t length() const = 0;   // positions in the KV cache
    virtual void truncate(int64_t n) = 0; // keep the first n positions
    virtual void clear() = 0;             // no positions (a new segment)
    virtual Tensor embed(const std::vector<int>& ids) const = 0; // host input rows [n, D]
    // Runs the decoder over input rows x [n, D] at positions length() … length()+n-1 (their keys and values join
    // the cache); the final-normed hidden rows are kept for logits(). An engine may ask `stop` between layers and
    // end the pass when it returns true: then false is returned and length() is unchanged (the CPU engine asks it;
    // a device pass runs to its end).
    virtual bool forward(Tensor x, const std::function<bool()>& stop) = 0;
    // Logits [n, V] of rows r0 … r0+n-1 of the last forward().
    virtual Tensor logits(int64_t r0, int64_t n) = 0;
    // Greedy tokens of rows r0 … r0+n-1 of the last forward(): the first index of each row's maximum logit. The
    // CPU engine finds them without computing every logit exactly (ops::head_argmax); by default, from logits().
    virtual std::vector<int> argmax(int64_t r0, int64_t n);
    // Whether argmax() over n rows costs about one pass over the head whatever n is (the CPU's screened choice).
    virtual bool screened_argmax() const { return false; }
};

// The model's device when it has one, else the CPU.
std::unique_ptr<StreamEngine> make_stream_engine(const std::shared_ptr<const Model>& model);

} // namespace qasr
