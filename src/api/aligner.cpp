// Aligner: the public front door of forced alignment (pipeline/align.hpp) over an immutable aligner Model.
#include "api/transcriber_impl.hpp"
#include "audio/audio.hpp"
#include "core/error.hpp"
#include "pipeline/align.hpp"
#include "qasr/qasr.hpp"

#include <algorithm>
#include <cmath>

namespace qasr {

struct Aligner::Impl {
    std::shared_ptr<const Model> model;
};

Aligner::Aligner(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Aligner::Aligner(Aligner&&) noexcept = default;
Aligner& Aligner::operator=(Aligner&&) noexcept = default;
Aligner::~Aligner() = default;

Aligner Aligner::load(const std::string& model_dir, const LoadOptions& opts) {
    check_load_options(opts);
    auto impl = std::make_unique<Impl>();
    impl->model = Model::load(model_dir, opts.device, opts.compute);
    if (!impl->model->hp.aligner.classes)
        fail("loader", model_dir + " is not a forced aligner (its config has no classify_num / token-classification "
                                   "head): word timestamps need a Qwen3-ForcedAligner checkpoint");
    return Aligner(std::move(impl));
}

Alignment Aligner::align(const std::vector<float>& samples, const std::string& text, const AlignOptions& opts) const {
    check_finite(samples.data(), samples.size(), "audio samples");
    Alignment a = align_audio(impl_->model, samples, text, opts);
    a.timings.load_ms = impl_->model->load_ms;
    return a;
}

Alignment Aligner::align_file(const std::string& path, const std::string& text, const AlignOptions& opts) const {
    return align(load_audio_file(path), text, opts);
}

void Aligner::add_words(const std::vector<float>& samples, TranscriptionResult& r, const AlignOptions& opts) const {
    constexpr double kPad = 0.2; // seconds of audio around a segment's speech extent
    r.words.clear();
    const double total = double(samples.size()) / kSampleRate;
    for (const Segment& seg : r.segments) {
        const double t0 = std::max(0.0, seg.start - kPad), t1 = std::min(total, seg.end + kPad);
        const size_t b = size_t(std::llround(t0 * kSampleRate)), e = size_t(std::llround(t1 * kSampleRate));
        if (e <= b) continue;
        const std::vector<float> piece(samples.begin() + long(b), samples.begin() + long(e));
        const Alignment a = align(piece, seg.text, opts);
        const double off = double(b) / kSampleRate;
        for (const AlignedWord& w : a.words)
            r.words.push_back({w.text, std::round((w.start + off) * 1000.0) / 1000.0,
                               std::round((w.end + off) * 1000.0) / 1000.0});
    }
}

double Aligner::load_ms() const { return impl_->model->load_ms; }

std::string Aligner::model_summary() const { return qasr::model_summary(*impl_->model); }

} // namespace qasr
