// Decoder forward over n new positions with a KV cache (prefill: n = prompt length; step: n = 1).
#include "model/decoder.hpp"

#include "core/error.hpp"
#include "ops/decode_step.hpp"
#include "ops/ops.hpp"
#include "ops/vector_ops.hpp"

#include <sys/mman.h>

#include <mutex>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace qasr {

bool kv_cache_bf16(bool model_bf16_compute) {
    static const int mode = [] {
        const char* e = std::getenv("QASR_KV");
        if (!e || !*e) return 0;
        if (!std::strcmp(e, "f32")) return -1;
        if (!std::strcmp(e, "bf16")) return 1;
        fail("decoder", std::string("QASR_KV=") + e + ": expected f32 or bf16");
    }();
    return mode == 0 ? model_bf16_compute : mode > 0;
}

namespace {

// Arenas of finished sessions kept for the next ones (QASR_KV_POOL=0: none): a fresh mapping's huge pages are
// zeroed by the kernel on first touch — and on a VM whose host has not backed them yet, found there too (measured:
// 40 MB first touched in 243 ms, then 3.5 ms) — so a request that reuses a warm arena skips that. At most 4
// arenas of ≤ 256 MiB, 512 MiB in all; the rest are unmapped.
struct ArenaPool {
    std::mutex mu;
    std::vector<KvArenaUnmap> free;
    size_t bytes = 0;
    static constexpr size_t kMaxArena = size_t(256) << 20, kMaxBytes = size_t(512) << 20, kMaxCount = 4;
    bool on = [] {
        const char* e = std::getenv("QASR_KV_POOL");
        return !(e && !std::strcmp(e, "0"));
    }();
};
ArenaPool& arena_pool() {
    static ArenaPool* p = new ArenaPool; // never destroyed: sessions may end during static destruction
    return *p;
}

// A pooled mapping of at least `bytes` (the smallest that fits; of equal ones the last returned, its pages the
// likeliest in the caches), or {nullptr, 0}.
KvArenaUnmap pool_take(size_t bytes) {
    ArenaPool& p = arena_pool();
    std::lock_guard<std::mutex> lock(p.mu);
    size_t best = p.free.size();
    for (size_t i = 0; i < p.free.size(); ++i)
        if (p.free[i].bytes >= bytes && (best == p.free.size() || p.free[i].bytes <= p.free[best].bytes)) best = i;
    if (best == p.free.size()) return {};
    KvArenaUnmap a = p.free[best];
    p.free.erase(p.free.begin() + std::ptrdiff_t(best));
    p.bytes -= a.bytes;
    return a;
}

} // namespace

void KvArenaUnmap::operator()(void*) const {
    if (!base) return;
    ArenaPool& p = arena_pool();
    if (p.on && bytes <= ArenaPool::kMaxArena) {
        std::lock_guard<std::mutex> lock(p.mu);
        if (p.free.size() < ArenaPool::kMaxCount && p.bytes + bytes <= ArenaPool::kMaxBytes) {
            p.free.push_back(*this);
            p.bytes += bytes;
            return;
        }
    }
    ::munmap(base, bytes);
}

void KvCache::reset(size_t n_layers) {
    if (k.size() != n_layers) {
        arena_.reset();
        cap = 0;
    }
    k.assign(n_layers, nullptr);
    v.assign(n_layers, nullptr);
    len = 0;
    if (arena_) reserve(0, heads, head_dim, bf16); // re-point k, v into the kept arena
}

void KvCache::truncate(int64_t n, int64_t row) {
    if (n >= len) return;
    if (row != heads * head_dim && len > 0) fail("decoder", "KV cache truncated with a different row width");
    len = n;
}

void KvCache::reserve(int64_t need, int64_t h, int64_t hd, bool b16) {
    const size_t L = k.size();
    if (len > 0 && (h != heads || hd != head_dim || b16 != bf16))
        fail("decoder", "KV cache holds positions of another layout or element type");
    const size_t es = b16 ? 2 : 4;
    const bool same = arena_ && h == heads && hd == head_dim && b16 == bf16;
    if (same && need <= cap) {
        const size_t region = size_t(heads * cap * head_dim) * es;
        char* base = static_cast<char*>(arena_.get());
        for (size_t l = 0; l < L; ++l) {
            k[l] = base + (2 * l) * region;
            v[l] = base + (2 * l + 1) * region;
        }
        return;
    }
    // A new arena: 128 positions of headroom (64-aligned), at least twice the old capacity.
    const int64_t ncap = (std::max(need + 128, same ? 2 * cap : int64_t(0)) + 63) / 64 * 64;
    const size_t region = size_t(h * ncap * hd) * es, bytes = std::max<size_t>(1, 2 * L * region);
    const size_t H = size_t(2) << 20;
    size_t mapped = (bytes + H - 1) / H * H + H;
    KvArenaUnmap got = pool_take(mapped);
    void* raw = got.base;
    if (raw) {
        mapped = got.bytes;
    } else {
        raw = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED)
            fail("decoder", "cannot map " + std::to_string(mapped >> 20) + " MiB for the KV cache");
    }
    char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + H - 1) & ~uintptr_t(H - 1));
    if (!got.base) ::madvise(base, mapped - size_t(base - static_cast<char*>(raw)), MADV_HUGEPAGE);
    std::unique_ptr<void, KvArenaUnmap> fresh(base, KvArenaUnmap{raw, mapped});
    for (size_t l = 0; l < L; ++l) {
        char* nk = base + (2 * l) * region;
        char* nv = base + (2 * l + 1) * region;
        if (len > 0)
            for (int64_t c = 0; c < heads; ++c) {
                const size_t off_old = size_t(c * cap * head_dim) * es, off_new = size_t(c * ncap * head_dim) * es;
                std::memcpy(nk + off_new, static_cast<const char*>(k[l]) + off_old, size_t(len * head_dim) * es);
                std::memcpy(nv + off_new, static_cast<const char*>(v[l]) + off_old, size_t(len * head_dim) * es);
            }
        k[l] = nk;
        v[l] = nv;
    }
    arena_ = std::move(fresh);
    cap = ncap;
    heads = h;
    head_dim = hd;
    bf16 = b16;
}

void KvCache::write(size_t layer, const float* kx, const float* vx, int64_t pos, int64_t n) {
    if (pos + n > cap) fail("decoder", "KV cache write past its capacity");
    const int64_t row = heads * head_dim;
    for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < heads; ++c) {
            const size_t dst = size_t((c * cap + pos + t) * head_dim), src = size_t(t * row + c * head_dim);
            if (bf16) {
                uint16_t* kd = static_cast<uint16_t*>(k[layer]) + dst;
                uint16_t* vd = static_cast<uint16_t*>(v[layer]) + dst;
                ops::round_to_bf16(kx + src, kd, size_t(head_dim));
                ops::round_to_bf16(vx + src, vd, size_t(head_dim));
            } else {
                std::memcpy(static_cast<float*>(k[layer]) + dst, kx + src, size_t(head_dim) * 4);
                std::memcpy(static_cast<float*>(v[layer]) + dst, vx + src, size_t(head_dim) * 4);
            }
        }
}

void KvCache::copy_from(const KvCache& src, int64_t from) {
    if (&src == this) return;
    if (from < 0 || from > len || from > src.len) fail("decoder", "KV cache copy from a position past the cache");
    if (k.size() != src.k.size()) {
        if (from > 0) fail("decoder", "KV cache copy between caches of different depths");
        reset(src.k.size());
    }
    len = from; // nothing after `from` needs keeping if the arena grows
    if (src.len == 0) return;
    reserve(src.len, src.heads, src.head_dim, src.bf16);
    const size_t es = bf16 ? 2 : 4, n = size_t(src.len - from) * size_t(head_dim) * es;
    for (size_t l = 0; l < k.size() && n > 0; ++l)
        for (int64_t c = 0; c < heads; ++c) {
            const size_t d = size_t((c * cap + from) * head_dim) * es, s = size_t((c * src.cap + from) * head_dim) * es;
            std::memcpy(static_cast<char*>(k[l]) + d, static_cast<const char*>(src.k[l]) + s, n);
            std::memcpy(static_cast<char*>(v[l]) + d, static_cast<const char*>(src.v[l]) + s, n);
        }
    len = src.len;
}

Decoder::Decoder(const DecoderW& w, const TextHParams& hp) : w_(w), hp_(hp) {
    const int64_t half = hp.head_dim / 2;
    inv_freq_.resize(size_t(half));
    for (int64_t i = 0; i < half; ++i)
        inv_freq_[size_t(i)] = float(1.0 / std::pow(hp.rope_theta, double(2 * i) / double(hp.head_dim)));
}

void Decoder::reserve(KvCache& cache, int64_t positions) const {
    if (cache.k.size() != w_.layers.size()) cache.reset(w_.layers.size());
    cache.reserve(positions, hp_.n_kv_heads, hp_.head_dim, kv_cache_bf16(w_.bf16_compute));
}

Tensor Decoder::embed(const std::vector<int>& ids) const {
    const int64_t D = hp_.hidden;
    Tensor x({int64_t(ids.size()), D});
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= hp_.vocab_size)
            fail("decoder", "token id " + std::to_string(ids[i]) + " is outside the vocabulary of " +
                                std::to_string(hp_.vocab_size));
        w_.embed.row_f32(ids[i], x.ptr() + int64_t(i) * D);
    }
    return x;
}

Tensor Decoder::forward(Tensor x, KvCache& cache, const TapFn* tap, const PassHook* stop) const {
    const int64_t n = x.rows(), D = hp_.hidden;
    if (n == 1 && !tap) { // a decode step: the whole stack as one op (the CPU runs it in one parallel region)
        ops::decode_step(w_, hp_, inv_freq_.data(), x.ptr(), cache);
        return x;
    }
    if (n <= kRowBlock || tap) return forward_rows(std::move(x), cache, tap, stop);
    // A long pass (a long piece's prefill) in blocks of rows, each through the whole stack over the cache the blocks
    // before it filled: the same values row for row, with the activations and the attention's scratch bounded by
    // the block (a 20-minute piece's 15615 rows at once took ~0.9 GB of activations, and n × keys floats per
    // thread where attention runs on sgemm), and stop asked after every block's layer
    const int64_t past = cache.len;
    reserve(cache, past + n);
    Tensor block; // one allocation for every block: forward_rows returns its input's storage
    for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
        const int64_t rows = std::min(kRowBlock, n - r0);
        block.shape = {rows, D};
        block.data.resize(size_t(rows * D));
        std::memcpy(block.ptr(), x.row(r0), size_t(rows * D) * sizeof(float));
        const PassHook part = sub_hook(stop, double(r0) / double(n), double(rows) / double(n));
        block = forward_rows(std::move(block), cache, nullptr, &part);
        if (block.size() == 0) {
            cache.len = past; // the blocks before do not count either
            return Tensor();
        }
        std::memcpy(x.row(r0), block.ptr(), size_t(rows * D) * sizeof(float));
    }
    return x;
}

Tensor Decoder::forward_rows(Tensor x, KvCache& cache, const TapFn* tap, const PassHook* stop) const {
    const int64_t n = x.rows(), D = hp_.hidden, hd = hp_.head_dim, Hq = hp_.n_heads, Hkv = hp_.n_kv_heads;
    const int64_t past = cache.len;
    ops::Bf16GemmScope precision(w_.bf16_compute);
    reserve(cache, past + n);
    std::vector<float> cs(size_t(n * hd)); // RoPE angles of these positions, shared by every layer
    ops::rope_table(n, hd, past, inv_freq_.data(), cs.data());
    // Activations: per-thread buffers reused by every layer and every pass (the products write their outputs whole,
    // so no zero fill; a fresh allocation per pass cost page faults and clearing, ~3 % of a 146-row pass).
    const bool any = !w_.layers.empty();
    const int64_t Nq = any ? w_.layers[0].q.w.rows : 0, Nkv = any ? w_.layers[0].k.w.rows : 0;
    const int64_t I = any ? w_.layers[0].gate.w.rows : 0;
    thread_local Tensor buf[8];
    const auto shaped = [&](int i, int64_t cols) -> Tensor& {
        buf[i].shape = {n, cols};
        buf[i].data.resize(size_t(n * cols));
        return buf[i];
    };
    Tensor &u = shaped(0, D), &q = shaped(1, Nq), &k = shaped(2, Nkv), &v = shaped(3, Nkv), &o = shaped(4, Hq * hd),
           &a = shaped(5, D), &g = shaped(6, I), &up = shaped(7, I);
    // several matrices of one input: fused matrix-vector products for one row, one GEMM each otherwise
    const auto products = [&](const Tensor& in, std::vector<const WeightMatrix*> Ws, std::vector<Tensor*> ys) {
        if (n == 1) {
            if (Ws.size() == 1) *ys[0] = ops::linear(in, *Ws[0]);
            else ops::linear_multi(in, Ws, ys);
            return;
        }
        std::vector<float*> out;
        for (size_t i = 0; i < Ws.size(); ++i) {
            if (in.cols() != Ws[i]->cols || ys[i]->cols() != Ws[i]->rows)
                fail("decoder", "layer matrices of different shapes");
            out.push_back(ys[i]->ptr());
        }
        ops::linear_multi_rows(in.ptr(), n, Ws.data(), out.data(), Ws.size());
    };
    // Row-parallel steps between the products (ops::add_rms_norm_rows, ops::qk_norm_rope_rows): the values of
    // add / copy / rms_norm / rope_cs / the cache write op by op, in fewer parallel regions.
    struct Put {
        KvCache* cache;
        size_t li;
        const float *k, *v;
        int64_t row, past;
    };
    const auto put = [](void* ctx, int64_t t) {
        const Put& p = *static_cast<const Put*>(ctx);
        p.cache->write(p.li, p.k + t * p.row, p.v + t * p.row, p.past + t, 1);
    };
    if (any) ops::add_rms_norm_rows(x.ptr(), nullptr, u.ptr(), n, D, w_.layers[0].in_norm.ptr(), hp_.rms_eps);
    for (size_t li = 0; li < w_.layers.size(); ++li) {
        const DecoderLayerW& l = w_.layers[li];
        products(u, {&l.q.w, &l.k.w, &l.v.w}, {&q, &k, &v});
        Put pc{&cache, li, k.ptr(), v.ptr(), Nkv, past};
        ops::qk_norm_rope_rows(q.ptr(), k.ptr(), n, Hq, Hkv, hd, l.q_norm.ptr(), l.k_norm.ptr(), hp_.rms_eps,
                               cs.data(), put, &pc);
        ops::KvView kv;
        kv.k = cache.k[li];
        kv.v = cache.v[li];
        kv.head_stride = cache.cap * hd;
        kv.pos_stride = hd;
        kv.bf16 = cache.bf16;
        ops::causal_attention(q.ptr(), kv, o.ptr(), n, past, Hq, Hkv, hd);
        products(o, {&l.o.w}, {&a});
        ops::add_rms_norm_rows(x.ptr(), a.ptr(), u.ptr(), n, D, l.post_norm.ptr(), hp_.rms_eps);
        // the quantized checkpoints' multi-row pass takes the vectorized exp (fused into the gate/up product where
        // it can be); float checkpoints and the single-row step keep ops::silu_mul
        if (n > 1 && w_.bf16_compute) {
            ops::linear_swiglu_rows(u.ptr(), n, l.gate.w, l.up.w, g.ptr());
        } else {
            products(u, {&l.gate.w, &l.up.w}, {&g, &up});
            ops::silu_mul(g.ptr(), up.ptr(), g.size());
        }
        products(g, {&l.down.w}, {&a});
        // the residual, and the next layer's input norm
        const bool last = li + 1 == w_.layers.size();
        ops::add_rms_norm_rows(x.ptr(), a.ptr(), last ? nullptr : u.ptr(), n, D,
                               last ? nullptr : w_.layers[li + 1].in_norm.ptr(), hp_.rms_eps);
        if (tap) (*tap)("dec_layer." + std::to_string(li), x);
        if (!last && ask(stop, double(li + 1) / double(w_.layers.size()))) return Tensor(); // cache.len unchanged
    }
    if (n * (D + Nq + 2 * Nkv + Hq * hd + D + 2 * I) > (int64_t(16) << 20)) // keep at most 64 MB per thread
        for (Tensor& t : buf) t = Tensor();
    cache.len = past + n;
    ops::rms_norm(x.ptr(), n, D, w_.norm.ptr(), hp_.rms_eps);
    return x;
}

Tensor Decoder::forward_batch(Tensor x, KvCache* const* caches) const {
    if (x.rows() == 1) return forward(std::move(x), *caches[0]);
    ops::decode_step_batch(w_, hp_, inv_freq_.data(), x.ptr(), x.rows(), caches);
    return x;
}

Tensor Decoder::logits_batch(const Tensor& h) const {
    const WeightMatrix& W = head();
    if (h.cols() != W.cols) fail("decoder", "hidden width " + std::to_string(h.cols()) + " != LM head " + shape_str(W.shape()));
    Tensor y({h.rows(), W.rows});
    ops::gemv_batch(h.ptr(), h.rows(), W, y.ptr());
    return y;
}

Tensor Decoder::logits(const Tensor& h) const {
    const WeightMatrix& head = w_.lm_head.empty() ? w_.embed : w_.lm_head;
    return ops::linear(h, head);
}

} // namespace qasr
