// Weight table: canonical (-hf) names with expected shapes, mapped to the stored names of each scheme
// (original `thinker.*`, `-hf`, mlx-community). Matrices stay in the memory-mapped file when their stored
// format is a compute format (bf16, f32, MLX affine 4/6/8-bit with bf16 scales); anything else (f16, other
// widths, non-bf16 scales, misaligned data) is converted to float32. Norms, biases and convs become float32;
// MLX OHWI conv weights are transposed to OIHW.
#include "model/weights.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "model/quant.hpp"

#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <unistd.h>
#include <functional>
#include <set>

namespace qasr {

std::string detect_scheme(const TensorStore& store) {
    bool thinker = false, hf = false, mlx = false;
    for (const auto& [name, t] : store.tensors()) {
        if (name.rfind("thinker.", 0) == 0) thinker = true;
        else if (name.rfind("model.language_model.", 0) == 0 || name.rfind("model.audio_tower.", 0) == 0) hf = true;
        else if (name.rfind("audio_tower.", 0) == 0 || name.rfind("model.embed_tokens.", 0) == 0) mlx = true;
    }
    if (int(thinker) + int(hf) + int(mlx) != 1)
        fail("loader", "cannot tell the checkpoint layout from its tensor names (expected thinker.*, "
                       "model.language_model.* or audio_tower.*/model.* names)");
    return thinker ? "original" : hf ? "hf" : "mlx";
}

static bool replace_prefix(std::string& s, const std::string& from, const std::string& to) {
    if (s.rfind(from, 0) != 0) return false;
    s = to + s.substr(from.size());
    return true;
}

std::string stored_name(const std::string& canonical, const std::string& scheme) {
    std::string s = canonical;
    if (scheme == "hf") return s;
    const std::string root = scheme == "original" ? "thinker." : "";
    if (replace_prefix(s, "model.language_model.", root + "model.")) return s;
    if (replace_prefix(s, "model.multi_modal_projector.linear_1.", root + "audio_tower.proj1.")) return s;
    if (replace_prefix(s, "model.multi_modal_projector.linear_2.", root + "audio_tower.proj2.")) return s;
    if (replace_prefix(s, "model.audio_tower.", root + "audio_tower.")) return s;
    if (replace_prefix(s, "lm_head.", root + "lm_head.")) return s;
    if (replace_prefix(s, "score.", root + "lm_head.")) return s; // the aligner's classifier (spec §2.3)
    return s;
}

namespace {

enum class Kind { Plain, Conv, Quantizable };

struct Spec {
    std::string name; // canonical
    std::vector<int64_t> shape;
    Tensor* dest;
    Kind kind;
    WeightMatrix* mdest = nullptr; // matrices (Kind::Quantizable)
};

class TableLoader {
public:
    TableLoader(const TensorStore& store, const HParams& hp)
        : store_(store), hp_(hp), scheme_(detect_scheme(store)), keep_(std::make_shared<TensorStore>(store)) {}

    void add(const std::string& name, std::vector<int64_t> shape, Tensor* dest, Kind kind = Kind::Plain) {
        specs_.push_back({name, std::move(shape), dest, kind});
    }
    void matrix(const std::string& name, std::vector<int64_t> shape, WeightMatrix* dest) {
        specs_.push_back({name, std::move(shape), nullptr, Kind::Quantizable, dest});
    }
    void linear(const std::string& prefix, Linear& l, int64_t out, int64_t in, bool bias) {
        matrix(prefix + ".weight", {out, in}, &l.w);
        if (bias) add(prefix + ".bias", {out}, &l.b);
    }
    const std::string& scheme() const { return scheme_; }

    void check_and_load() {
        std::vector<std::string> problems;
        std::set<std::string> used;
        for (const auto& s : specs_) check(s, problems, used);
        for (const auto& [name, t] : store_.tensors())
            if (!used.count(name) && !ignorable(name)) problems.push_back("unexpected tensor " + name + " " +
                                                                         dtype_name(t.dtype) + shape_str(t.shape));
        if (!problems.empty()) {
            std::string msg = std::to_string(problems.size()) + " problem(s) in the weight table (" + scheme_ +
                              " layout):";
            size_t shown = 0;
            for (const auto& p : problems) {
                if (++shown > 40) {
                    msg += "\n  ... and " + std::to_string(problems.size() - 40) + " more";
                    break;
                }
                msg += "\n  " + p;
            }
            fail("loader", msg);
        }
        for (const auto& s : specs_) load(s);
    }

private:
    bool ignorable(const std::string& name) const {
        return !hp_.aligner.classes && name == stored_name("lm_head.weight", scheme_); // tied copy, checked separately
    }

    bool quantized(const Spec& s) const {
        if (s.kind != Kind::Quantizable) return false;
        std::string base = stored_name(s.name, scheme_);
        base = base.substr(0, base.size() - std::string(".weight").size());
        return store_.find(base + ".scales") != nullptr;
    }

    void check(const Spec& s, std::vector<std::string>& problems, std::set<std::string>& used) const {
        const std::string sn = stored_name(s.name, scheme_);
        const TensorRef* t = store_.find(sn);
        if (!t) {
            problems.push_back("missing " + sn + " " + shape_str(s.shape));
            return;
        }
        used.insert(sn);
        if (quantized(s)) {
            const std::string base = sn.substr(0, sn.size() - 7);
            used.insert(base + ".scales");
            if (store_.find(base + ".biases")) used.insert(base + ".biases");
            try {
                describe_affine(store_, base, s.shape, hp_.quant);
            } catch (const Error& e) {
                problems.push_back(e.what());
            }
            return;
        }
        bool ok = t->shape == s.shape;
        if (!ok && s.kind == Kind::Conv && s.shape.size() == 4)
            ok = t->shape == std::vector<int64_t>{s.shape[0], s.shape[2], s.shape[3], s.shape[1]}; // OHWI
        if (!ok) problems.push_back(sn + ": expected " + shape_str(s.shape) + ", got " + shape_str(t->shape));
        if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
            problems.push_back(sn + ": dtype " + dtype_name(t->dtype) + " is not a float type");
    }

    void load(const Spec& s) {
        const std::string sn = stored_name(s.name, scheme_);
        if (s.mdest) {
            *s.mdest = load_matrix(s, sn);
            return;
        }
        const TensorRef& t = *store_.find(sn);
        Tensor out(t.shape);
        to_f32(t, out.ptr());
        if (s.kind == Kind::Conv && t.shape != s.shape) out = ohwi_to_oihw(out, s.shape);
        *s.dest = std::move(out);
    }

    // A matrix in its compute format: mapped bf16/f32, mapped MLX affine 4/6/8-bit (bf16 scales and biases,
    // group size a multiple of 32), otherwise converted to float32.
    WeightMatrix load_matrix(const Spec& s, const std::string& sn) {
        const int64_t rows = s.shape[0], cols = s.shape[1];
        auto aligned = [](const TensorRef& t, size_t a) { return reinterpret_cast<uintptr_t>(t.data) % a == 0; };
        if (quantized(s)) {
            const std::string base = sn.substr(0, sn.size() - 7);
            const AffineLayout L = describe_affine(store_, base, s.shape, hp_.quant);
            const TensorRef& w = *store_.find(base + ".weight");
            const TensorRef& sc = *store_.find(base + ".scales");
            const TensorRef& bi = *store_.find(base + ".biases");
            if ((L.bits == 4 || L.bits == 6 || L.bits == 8) && L.group_size % 32 == 0 && sc.dtype == DType::BF16 &&
                bi.dtype == DType::BF16 && aligned(sc, 2) && aligned(bi, 2)) {
                WeightMatrix m;
                m.fmt = WFormat::Q;
                m.rows = rows;
                m.cols = cols;
                m.bits = L.bits;
                m.group_size = L.group_size;
                m.data = w.data;
                m.scales = reinterpret_cast<const uint16_t*>(sc.data);
                m.biases = reinterpret_cast<const uint16_t*>(bi.data);
                m.owner = keep_;
                return m;
            }
            return WeightMatrix::from_tensor(dequantize_affine(store_, base, s.shape, hp_.quant));
        }
        const TensorRef& t = *store_.find(sn);
        if ((t.dtype == DType::BF16 && aligned(t, 2)) || (t.dtype == DType::F32 && aligned(t, 4))) {
            WeightMatrix m;
            m.fmt = t.dtype == DType::BF16 ? WFormat::BF16 : WFormat::F32;
            m.rows = rows;
            m.cols = cols;
            m.data = t.data;
            m.owner = keep_;
            return m;
        }
        std::vector<float> v(t.numel());
        to_f32(t, v.data());
        return WeightMatrix::from_f32(std::move(v), rows, cols);
    }

    static Tensor ohwi_to_oihw(const Tensor& in, const std::vector<int64_t>& oihw) {
        Tensor out(oihw);
        const int64_t O = oihw[0], I = oihw[1], H = oihw[2], W = oihw[3];
        for (int64_t o = 0; o < O; ++o)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t w = 0; w < W; ++w)
                    for (int64_t i = 0; i < I; ++i)
                        out.data[size_t(((o * I + i) * H + h) * W + w)] = in.data[size_t(((o * H + h) * W + w) * I + i)];
        return out;
    }

    const TensorStore& store_;
    const HParams& hp_;
    std::string scheme_;
    std::vector<Spec> specs_;
    std::shared_ptr<const TensorStore> keep_; // keeps the mapping alive for mapped matrices
};

} // namespace

template <typename Convert> static void widen_16bit(const uint8_t* src, size_t n, float* out, Convert convert) {
#pragma omp parallel for if (n > (1u << 20))
    for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = convert(h);
    }
}

void to_f32(const TensorRef& t, float* out) {
    const size_t n = t.numel();
    switch (t.dtype) {
    case DType::F32: std::memcpy(out, t.data, n * 4); break;
    case DType::BF16: widen_16bit(t.data, n, out, bf16_to_f32); break;
    case DType::F16: widen_16bit(t.data, n, out, f16_to_f32); break;
    default: fail("loader", t.name + ": dtype " + dtype_name(t.dtype) + " cannot be read as float");
    }
}

namespace {

// Declares every tensor of the model (canonical name, shape, destination) to a sink with add()/linear().
template <typename Sink> void declare_weights(Sink& L, ModelWeights& W, const HParams& hp) {
    const AudioHParams& a = hp.audio;
    const TextHParams& t = hp.text;
    const int64_t C = a.conv_channels, d = a.d_model, F = a.ffn_dim;
    EncoderW& E = W.enc;
    const std::string at = "model.audio_tower.";
    L.add(at + "conv2d1.weight", {C, 1, 3, 3}, &E.conv1_w, Kind::Conv);
    L.add(at + "conv2d1.bias", {C}, &E.conv1_b);
    L.add(at + "conv2d2.weight", {C, C, 3, 3}, &E.conv2_w, Kind::Conv);
    L.add(at + "conv2d2.bias", {C}, &E.conv2_b);
    L.add(at + "conv2d3.weight", {C, C, 3, 3}, &E.conv3_w, Kind::Conv);
    L.add(at + "conv2d3.bias", {C}, &E.conv3_b);
    L.linear(at + "conv_out", E.conv_out, d, C * a.freq_after_conv(), false);
    E.layers.resize(size_t(a.n_layers));
    for (int i = 0; i < a.n_layers; ++i) {
        const std::string p = at + "layers." + std::to_string(i) + ".";
        EncoderLayerW& l = E.layers[size_t(i)];
        L.add(p + "self_attn_layer_norm.weight", {d}, &l.attn_norm.w);
        L.add(p + "self_attn_layer_norm.bias", {d}, &l.attn_norm.b);
        L.linear(p + "self_attn.q_proj", l.q, d, d, true);
        L.linear(p + "self_attn.k_proj", l.k, d, d, true);
        L.linear(p + "self_attn.v_proj", l.v, d, d, true);
        L.linear(p + "self_attn.out_proj", l.o, d, d, true);
        L.add(p + "final_layer_norm.weight", {d}, &l.ffn_norm.w);
        L.add(p + "final_layer_norm.bias", {d}, &l.ffn_norm.b);
        L.linear(p + "fc1", l.fc1, F, d, true);
        L.linear(p + "fc2", l.fc2, d, F, true);
    }
    L.add(at + "ln_post.weight", {d}, &E.ln_post.w);
    L.add(at + "ln_post.bias", {d}, &E.ln_post.b);
    L.linear("model.multi_modal_projector.linear_1", E.proj1, d, d, true);
    L.linear("model.multi_modal_projector.linear_2", E.proj2, a.output_dim, d, true);

    DecoderW& D = W.dec;
    const int64_t Dm = t.hidden, hd = t.head_dim, Hq = int64_t(t.n_heads) * hd, Hkv = int64_t(t.n_kv_heads) * hd;
    const std::string lm = "model.language_model.";
    L.matrix(lm + "embed_tokens.weight", {t.vocab_size, Dm}, &D.embed);
    D.layers.resize(size_t(t.n_layers));
    for (int j = 0; j < t.n_layers; ++j) {
        const std::string p = lm + "layers." + std::to_string(j) + ".";
        DecoderLayerW& l = D.layers[size_t(j)];
        L.add(p + "input_layernorm.weight", {Dm}, &l.in_norm);
        L.linear(p + "self_attn.q_proj", l.q, Hq, Dm, false);
        L.linear(p + "self_attn.k_proj", l.k, Hkv, Dm, false);
        L.linear(p + "self_attn.v_proj", l.v, Hkv, Dm, false);
        L.linear(p + "self_attn.o_proj", l.o, Dm, Hq, false);
        L.add(p + "self_attn.q_norm.weight", {hd}, &l.q_norm);
        L.add(p + "self_attn.k_norm.weight", {hd}, &l.k_norm);
        L.add(p + "post_attention_layernorm.weight", {Dm}, &l.post_norm);
        L.linear(p + "mlp.gate_proj", l.gate, t.intermediate, Dm, false);
        L.linear(p + "mlp.up_proj", l.up, t.intermediate, Dm, false);
        L.linear(p + "mlp.down_proj", l.down, Dm, t.intermediate, false);
    }
    L.add(lm + "norm.weight", {Dm}, &D.norm);
    if (hp.aligner.classes) L.matrix("score.weight", {hp.aligner.classes, Dm}, &D.lm_head); // untied classifier
}

struct NameCollector {
    std::vector<std::pair<std::string, std::vector<int64_t>>> out;
    void add(const std::string& name, std::vector<int64_t> shape, Tensor*, Kind = Kind::Plain) {
        out.emplace_back(name, std::move(shape));
    }
    void matrix(const std::string& name, std::vector<int64_t> shape, WeightMatrix*) {
        out.emplace_back(name, std::move(shape));
    }
    void linear(const std::string& prefix, Linear&, int64_t o, int64_t i, bool bias) {
        add(prefix + ".weight", {o, i}, nullptr);
        if (bias) add(prefix + ".bias", {o}, nullptr);
    }
};

struct Visitor {
    const WeightVisitor& fn;
    void add(const std::string& name, std::vector<int64_t> shape, Tensor* t, Kind = Kind::Plain) {
        fn(name, shape, t, nullptr);
    }
    void matrix(const std::string& name, std::vector<int64_t> shape, WeightMatrix* m) { fn(name, shape, nullptr, m); }
    void linear(const std::string& prefix, Linear& l, int64_t o, int64_t i, bool bias) {
        matrix(prefix + ".weight", {o, i}, &l.w);
        if (bias) add(prefix + ".bias", {o}, &l.b);
    }
};

} // namespace

void for_each_weight(const ModelWeights& w, const HParams& hp, const WeightVisitor& fn) {
    Visitor v{fn};
    declare_weights(v, const_cast<ModelWeights&>(w), hp); // the visitor only reads
    if (!hp.aligner.classes && !w.dec.lm_head.empty()) fn("lm_head.weight", w.dec.lm_head.shape(), nullptr, &w.dec.lm_head);
}

std::vector<std::pair<std::string, std::vector<int64_t>>> weight_table(const HParams& hp) {
    NameCollector c;
    ModelWeights W;
    declare_weights(c, W, hp);
    return c.out;
}

namespace {

// QASR_WEIGHTS=hugepages: copies the matrices that would be read from the mapping (bf16 and quantized; f32 ones
// too) into one anonymous arena backed by transparent huge pages. The mapped file uses 4 KiB pages, at whose
// boundaries the hardware prefetchers stop: on the benchmark machine the decode's layer matrices stream ≈35%
// faster from huge pages. Off by default (the weights then stay mapped, shared with the page cache).
void copy_to_hugepages(ModelWeights& W, const HParams& hp) {
    std::vector<WeightMatrix*> mats;
    size_t total = 0;
    auto round64 = [](size_t n) { return (n + 63) & ~size_t(63); };
    for_each_weight(W, hp, [&](const std::string&, const std::vector<int64_t>&, const Tensor*, const WeightMatrix* m) {
        if (!m || !m->owner) return;
        auto* w = const_cast<WeightMatrix*>(m); // W is ours; the visitor only hands out const views
        mats.push_back(w);
        const size_t n = size_t(w->rows) * size_t(w->cols);
        if (w->fmt == WFormat::Q) total += round64(n * size_t(w->bits) / 8) + 2 * round64(2 * n / size_t(w->group_size));
        else total += round64(n * (w->fmt == WFormat::BF16 ? 2 : 4));
    });
    if (mats.empty()) return;
    constexpr size_t H = size_t(2) << 20;
    const size_t size = (total + H - 1) / H * H;
    void* p = ::mmap(nullptr, size + H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        log(LogLevel::Warn, "QASR_WEIGHTS=hugepages: cannot allocate " + std::to_string(size >> 20) + " MiB; weights stay mapped");
        return;
    }
    uint8_t* base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + H - 1) & ~uintptr_t(H - 1));
    ::madvise(base, size, MADV_HUGEPAGE);
    std::shared_ptr<const void> arena(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size + H); });
    size_t off = 0;
    auto put = [&](const void* src, size_t n) {
        std::memcpy(base + off, src, n);
        // the mapped source pages are no longer read: drop them from this process (they stay in the page cache)
        const uintptr_t pg = uintptr_t(::sysconf(_SC_PAGESIZE)), a0 = (reinterpret_cast<uintptr_t>(src) + pg - 1) & ~(pg - 1),
                        a1 = (reinterpret_cast<uintptr_t>(src) + n) & ~(pg - 1);
        if (a1 > a0) ::madvise(reinterpret_cast<void*>(a0), a1 - a0, MADV_DONTNEED);
        const void* dst = base + off;
        off += round64(n);
        return dst;
    };
    for (WeightMatrix* w : mats) {
        const size_t n = size_t(w->rows) * size_t(w->cols);
        if (w->fmt == WFormat::Q) {
            const size_t g = n / size_t(w->group_size);
            w->data = put(w->data, n * size_t(w->bits) / 8);
            w->scales = static_cast<const uint16_t*>(put(w->scales, 2 * g));
            w->biases = static_cast<const uint16_t*>(put(w->biases, 2 * g));
        } else {
            w->data = put(w->data, n * (w->fmt == WFormat::BF16 ? 2 : 4));
        }
        w->owner = arena;
    }
}

} // namespace

ModelWeights load_weights(const TensorStore& store, const HParams& hp) {
    ModelWeights W;
    TableLoader L(store, hp);
    W.scheme = L.scheme();
    const TextHParams& t = hp.text;
    if (hp.audio.output_dim != t.hidden)
        fail("loader", "audio_config.output_dim " + std::to_string(hp.audio.output_dim) + " != text hidden_size " +
                           std::to_string(t.hidden));
    declare_weights(L, W, hp);
    DecoderW& D = W.dec;
    const bool tied = !hp.aligner.classes &&
                      t.tie_word_embeddings.value_or(store.find(stored_name("lm_head.weight", W.scheme)) == nullptr);
    if (!tied && !hp.aligner.classes) L.matrix("lm_head.weight", {t.vocab_size, int64_t(t.hidden)}, &D.lm_head);
    L.check_and_load();
    // Quantized checkpoints are approximations already: their matrix-matrix products run in bf16 (AMX) like
    // MLX's; float checkpoints keep the float32 path that matches the reference.
    bool any_q = false;
    for_each_weight(W, hp, [&](const std::string&, const std::vector<int64_t>&, const Tensor*, const WeightMatrix* m) {
        if (m && m->fmt == WFormat::Q) any_q = true;
    });
    W.enc.bf16_compute = W.dec.bf16_compute = any_q;
    if (const char* e = std::getenv("QASR_WEIGHTS"); e && std::string(e) == "hugepages") copy_to_hugepages(W, hp);
    if (tied) {
        // A stored copy of the tied head is compared byte for byte when it has the embedding's stored format.
        const TensorRef* copy = store.find(stored_name("lm_head.weight", W.scheme));
        const TensorRef* emb = store.find(stored_name("model.language_model.embed_tokens.weight", W.scheme));
        if (copy && emb && copy->shape == emb->shape && copy->dtype == emb->dtype && copy->nbytes == emb->nbytes &&
            std::memcmp(copy->data, emb->data, copy->nbytes) != 0)
            log(LogLevel::Warn, "lm_head.weight differs from embed_tokens; using embed_tokens (tied, as the "
                                "reference does)");
    }
    return W;
}

} // namespace qasr
