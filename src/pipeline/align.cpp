#include "pipeline/align.hpp"

#include "core/error.hpp"
#include "core/timer.hpp"
#include "pipeline/session.hpp"

#include <algorithm>

namespace qasr {

AlignInput build_align_input(const Model& m, int64_t n_audio, std::vector<std::string> words) {
    const int ts = m.hp.aligner.timestamp_token_id;
    AlignInput in;
    in.words = std::move(words);
    std::vector<int>& ids = in.prompt.ids;
    ids.push_back(m.special.audio_start);
    in.prompt.audio_begin = int64_t(ids.size());
    in.prompt.n_audio = n_audio;
    ids.insert(ids.end(), size_t(n_audio), m.special.audio_pad);
    ids.push_back(m.special.audio_end);
    for (const std::string& w : in.words) {
        const std::vector<int> t = m.tokenizer.encode(w); // each word is a text segment of its own (no spaces)
        ids.insert(ids.end(), t.begin(), t.end());
        for (int k = 0; k < 2; ++k) {
            in.positions.push_back(int64_t(ids.size()));
            ids.push_back(ts);
        }
    }
    return in;
}

std::vector<int> timestamp_classes(const Tensor& logits, const std::vector<int64_t>& positions) {
    std::vector<int> out;
    out.reserve(positions.size());
    const int64_t C = logits.cols();
    for (int64_t p : positions) {
        const float* row = logits.row(p);
        out.push_back(int(std::max_element(row, row + C) - row)); // the first maximum, as torch.argmax
    }
    return out;
}

Alignment align_audio(const std::shared_ptr<const Model>& m, const std::vector<float>& audio, const std::string& text,
                      const AlignOptions& opts) {
    const AlignerHParams& ah = m->hp.aligner;
    if (!ah.classes)
        fail("align", m->dir + " is not a forced-aligner checkpoint (no classify_num / token-classification head); "
                      "word timestamps need Qwen3-ForcedAligner");
    Stopwatch total;
    Alignment r;
    r.audio_seconds = double(audio.size()) / 16000.0;
    const double cover_s = ah.classes * ah.segment_ms / 1000.0;
    if (r.audio_seconds > cover_s)
        fail("align", "the audio is " + std::to_string(r.audio_seconds) + " s long; the aligner's " +
                          std::to_string(ah.classes) + " classes of " + std::to_string(ah.segment_ms) +
                          " ms cover at most " + std::to_string(cover_s) + " s (cut it into pieces)");
    std::vector<std::string> words = split_alignment_words(text);
    if (words.empty()) return r; // nothing to time: the model does not run
    Session s(m);
    const Tensor rows = s.encode_samples(audio, opts.min_samples, r.timings);
    Stopwatch sw;
    const AlignInput in = build_align_input(*m, rows.rows(), std::move(words));
    const Tensor logits = s.prefill(in.prompt, rows, true);
    r.timings.prefill_ms = sw.ms();
    if (logits.rows() != int64_t(in.prompt.ids.size()) || logits.cols() != ah.classes)
        fail("align", "the aligner's logits are " + shape_str(logits.shape) + ", expected [" +
                          std::to_string(in.prompt.ids.size()) + ", " + std::to_string(ah.classes) + "]");
    const std::vector<int> cls = timestamp_classes(logits, in.positions);
    std::vector<double> raw_ms(cls.size());
    for (size_t i = 0; i < cls.size(); ++i) raw_ms[i] = double(float(cls[i]) * float(ah.segment_ms));
    const std::vector<int64_t> ms = fix_timestamps(raw_ms);
    r.words.reserve(in.words.size());
    for (size_t k = 0; k < in.words.size(); ++k)
        r.words.push_back({in.words[k], double(ms[2 * k]) / 1000.0, double(ms[2 * k + 1]) / 1000.0});
    r.classes = cls;
    r.n_tokens = int(in.prompt.ids.size());
    r.rtf = r.audio_seconds > 0 ? total.ms() / 1000.0 / r.audio_seconds : 0;
    return r;
}

} // namespace qasr
