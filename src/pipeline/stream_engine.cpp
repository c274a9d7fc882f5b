#include "pipeline/stream_engine.hpp"

#include "backend/device.hpp"
#include "core/error.hpp"
#include "model/decoder.hpp"
#include "model/encoder.hpp"
#include "model/model.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cstring>

namespace qasr {

std::vector<int> StreamEngine::argmax(int64_t r0, int64_t n) {
    const Tensor l = logits(r0, n);
    std::vector<int> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = int(std::max_element(l.row(i), l.row(i) + l.cols()) - l.row(i));
    return out;
}

namespace {

class CpuEngine final : public StreamEngine {
public:
    explicit CpuEngine(std::shared_ptr<const Model> m) : m_(std::move(m)), dec_(m_->weights.dec, m_->hp.text) {
        screen_ = m_->head_screen(); // once per model: here rather than inside the first final
    }
    Tensor stem(const Tensor& mel) override {
        return encode_stem_chunk(m_->weights.enc, m_->hp.audio, mel.ptr(), mel.cols(), mel.cols());
    }
    Tensor encode_rows(Tensor x, int64_t window_rows, const std::function<bool()>& stop) override {
        const PassHook hook = [&stop](double) { return stop && stop(); };
        return qasr::encode_rows(m_->weights.enc, m_->hp.audio, std::move(x), window_rows, nullptr, &hook);
    }
    int64_t length() const override { return cache_.len; }
    void truncate(int64_t n) override {
        cache_.truncate(n, int64_t(m_->hp.text.n_kv_heads) * m_->hp.text.head_dim);
        if (cache_.k.empty()) cache_.reset(m_->weights.dec.layers.size());
    }
    void clear() override { cache_ = KvCache(); }
    Tensor embed(const std::vector<int>& ids) const override { return dec_.embed(ids); }
    bool forward(Tensor x, const std::function<bool()>& stop) override {
        if (cache_.k.empty()) cache_.reset(m_->weights.dec.layers.size());
        const PassHook hook = [&stop](double) { return stop && stop(); };
        h_ = dec_.forward(std::move(x), cache_, nullptr, &hook);
        return h_.rows() > 0;
    }
    Tensor logits(int64_t r0, int64_t n) override {
        if (r0 < 0 || n < 0 || r0 + n > h_.rows()) fail("stream", "logits of rows outside the last pass");
        const int64_t D = h_.cols();
        Tensor hr({n, D});
        std::memcpy(hr.ptr(), h_.row(r0), size_t(n * D) * sizeof(float));
        return dec_.logits(hr);
    }
    std::vector<int> argmax(int64_t r0, int64_t n) override {
        if (r0 < 0 || n < 0 || r0 + n > h_.rows()) fail("stream", "logits of rows outside the last pass");
        std::vector<int> out(static_cast<size_t>(n));
        ops::head_argmax(h_.row(r0), n, dec_.head(), screen_, out.data());
        return out;
    }
    bool screened_argmax() const override { return screen_ != nullptr; }

private:
    std::shared_ptr<const Model> m_;
    Decoder dec_;
    KvCache cache_;
    Tensor h_;
    const ops::HeadScreen* screen_ = nullptr;
};

class DeviceEngine final : public StreamEngine {
public:
    explicit DeviceEngine(std::shared_ptr<const Model> m)
        : m_(std::move(m)), dec_(m_->weights.dec, m_->hp.text), s_(m_->device->open()) {}
    Tensor stem(const Tensor& mel) override { return s_->encode_stem(mel); }
    Tensor encode_rows(Tensor x, int64_t window_rows, const std::function<bool()>&) override {
        return s_->encode_rows(x, window_rows);
    }
    int64_t length() const override { return s_->length(); }
    void truncate(int64_t n) override { s_->truncate(n); }
    void clear() override { s_->truncate(0); }
    Tensor embed(const std::vector<int>& ids) const override { return dec_.embed(ids); }
    bool forward(Tensor x, const std::function<bool()>&) override {
        s_->extend(x);
        return true;
    }
    Tensor logits(int64_t r0, int64_t n) override { return s_->extended_logits(r0, n); }

private:
    std::shared_ptr<const Model> m_;
    Decoder dec_; // the embedding lookup (host rows)
    std::unique_ptr<DeviceSession> s_;
};

} // namespace

std::unique_ptr<StreamEngine> make_stream_engine(const std::shared_ptr<const Model>& model) {
    if (model->device) return std::make_unique<DeviceEngine>(model);
    return std::make_unique<CpuEngine>(model);
}

} // namespace qasr
