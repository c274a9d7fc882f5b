// ops::decode_step (the whole layer stack of one decode step in one parallel region) against the per-op path of
// Decoder::forward on one row (taken when a tap is passed), on 1, 2 and 3 threads (3 > the tiny preset's 2 KV
// heads: a thread without heads), across a cache growth: the float32 path (bf16 checkpoint, float32 cache) bit for
// bit, hidden states and KV cache; quantized checkpoints (bf16 cache) within 2e-3 (their SiLU takes the vectorized
// exp) and bit for bit across thread counts. Runs once per forced ISA (Kernels.*).
#include "backend/cpu/gemv.hpp"
#include "model/decoder.hpp"
#include "model/encoder.hpp"
#include "model/model.hpp"
#include "model/quantize_checkpoint.hpp"
#include "model/random_checkpoint.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <filesystem>
#include <random>
#include <unistd.h>

using namespace qasr;
namespace fs = std::filesystem;

namespace {

// Positions [0, len) of every layer's keys and values, as bytes.
std::vector<uint8_t> cache_bytes(const KvCache& c) {
    std::vector<uint8_t> out;
    const size_t es = c.bf16 ? 2 : 4, n = size_t(c.len * c.head_dim) * es;
    for (size_t l = 0; l < c.k.size(); ++l)
        for (const void* base : {c.k[l], c.v[l]})
            for (int64_t h = 0; h < c.heads; ++h) {
                const auto* p = static_cast<const uint8_t*>(base) + size_t(h * c.cap * c.head_dim) * es;
                out.insert(out.end(), p, p + n);
            }
    return out;
}

// A tiny random checkpoint in bf16 and quantized to each width in `bits`, under a fresh temporary folder.
std::string make_checkpoints(const std::string& tag, std::initializer_list<int> bits) {
    const std::string base = testing::TempDir() + "/qasr_" + tag + "_" + std::to_string(::getpid());
    fs::remove_all(base);
    write_random_checkpoint(base + "/bf16", "tiny", "hf", 5, QASR_TOKENIZER_DIR);
    for (const int b : bits) {
        QuantizeOptions o;
        o.bits = b;
        quantize_checkpoint(base + "/bf16", base + "/q" + std::to_string(b), o);
    }
    return base;
}

} // namespace

TEST(Kernels, DecodeStepMatchesPerOpForward) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string base = make_checkpoints("decode_step", {8, 4});
    for (const char* name : {"bf16", "q8", "q4"}) {
        const auto m = Model::load(base + "/" + name);
        const bool quantized = std::string(name) != "bf16";
        const Decoder dec(m->weights.dec, m->hp.text);
        const int64_t D = m->hp.text.hidden;
        std::mt19937 rng(9);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        Tensor prompt({5, D});
        for (float& f : prompt.data) f = nd(rng);
        std::vector<std::vector<float>> first_run; // the step's outputs on one thread
        std::vector<uint8_t> first_cache;
        double worst = 0;
        for (const int threads : {1, 2, 3}) {
            ops::set_num_threads(threads);
            KvCache ref, got;
            dec.forward(prompt, ref);
            dec.forward(prompt, got);
            const TapFn tap = [](const std::string&, const Tensor&) {}; // any tap keeps the per-op path
            std::mt19937 tokens(11);
            // 140 steps: the cache (5 + 128 positions of headroom) grows once on the way
            for (int step = 0; step < 140; ++step) {
                const Tensor x = dec.embed({int(tokens() % 1000)});
                const Tensor a = dec.forward(x, ref, &tap), b = dec.forward(x, got);
                const std::string what = std::string(name) + " threads " + std::to_string(threads) + " step " +
                                         std::to_string(step);
                if (threads == 1) {
                    first_run.push_back(b.data);
                } else {
                    ASSERT_EQ(b.data, first_run[size_t(step)]) << what; // independent of the thread count
                }
                if (!quantized) {
                    ASSERT_EQ(a.data, b.data) << what;
                } else {
                    // SiLU·up with the vectorized exp (a few ulp) instead of std::exp; a difference that flips the
                    // bf16 rounding of a cached key/value or the int16 rounding of x in the VNNI kernels' prep grows
                    // to ≈1e-4 relative here (worst seen 2.6e-4 over 140 steps on q8 and q4)
                    for (size_t i = 0; i < a.data.size(); ++i) {
                        const double d = std::fabs(double(a.data[i]) - b.data[i]) / (1.0 + std::fabs(a.data[i]));
                        worst = std::max(worst, d);
                        ASSERT_LE(d, 2e-3) << what << " at " << i << ": " << a.data[i] << " vs " << b.data[i];
                    }
                }
            }
            ASSERT_EQ(ref.len, got.len);
            EXPECT_EQ(ref.bf16, quantized) << name;
            if (threads == 1) {
                first_cache = cache_bytes(got);
            } else {
                EXPECT_EQ(cache_bytes(got), first_cache) << name << " threads " << threads;
            }
            if (!quantized) {
                EXPECT_EQ(cache_bytes(ref), cache_bytes(got)) << name << " threads " << threads;
            }
        }
        std::printf("[decode-step] %s: worst relative difference to the per-op path %.2e\n", name, worst);
    }
    ops::set_num_threads(0);
    fs::remove_all(base);
}

// A batched decode step (ops::decode_step_batch + the batched LM head: several requests decoding together) gives
// every row bit for bit what its sequence's single step gives, hidden state, logits and KV cache: five sequences of
// different lengths, leaving the batch one after another (batches of 5, 3, 2: the multi-input kernels' groups of
// 4, 3, 2 and 1), each checkpoint format, 1–3 threads, 42 steps.
TEST(Kernels, DecodeStepBatchRowsEqualSingleSteps) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string base = make_checkpoints("decode_batch", {8, 6, 4});
    QuantizeOptions g32; // 8-bit with groups of 32: the other 8-bit VNNI kernel
    g32.bits = 8;
    g32.group_size = 32;
    quantize_checkpoint(base + "/bf16", base + "/q8g32", g32);
    for (const char* name : {"bf16", "q8", "q8g32", "q6", "q4"}) {
        const auto m = Model::load(base + "/" + name);
        const Decoder dec(m->weights.dec, m->hp.text);
        const int64_t D = m->hp.text.hidden;
        std::mt19937 rng(21);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (const int threads : {1, 2, 3}) {
            ops::set_num_threads(threads);
            KvCache alone[5], batched[5];
            const int64_t lens[5] = {5, 131, 2, 17, 64};
            for (int s = 0; s < 5; ++s) {
                Tensor prompt({lens[s], D});
                for (float& f : prompt.data) f = nd(rng);
                dec.forward(prompt, alone[s]);
                dec.forward(prompt, batched[s]);
            }
            std::mt19937 tokens(5);
            for (int step = 0; step < 42; ++step) {
                const int B = step < 14 ? 5 : step < 28 ? 3 : 2; // the last sequences leave the batch
                std::vector<int> ids;
                for (int s = 0; s < B; ++s) ids.push_back(int(tokens() % 1000));
                std::vector<KvCache*> caches;
                for (int s = 0; s < B; ++s) caches.push_back(&batched[s]);
                const Tensor h = dec.forward_batch(dec.embed(ids), caches.data());
                const Tensor lg = dec.logits_batch(h);
                ASSERT_EQ(h.rows(), B);
                ASSERT_EQ(lg.rows(), B);
                for (int s = 0; s < B; ++s) {
                    const Tensor h1 = dec.forward(dec.embed({ids[size_t(s)]}), alone[s]);
                    const Tensor l1 = dec.logits(h1);
                    const std::string what = std::string(name) + " threads " + std::to_string(threads) + " step " +
                                             std::to_string(step) + " row " + std::to_string(s);
                    ASSERT_EQ(0, std::memcmp(h1.ptr(), h.row(s), size_t(D) * 4)) << what;
                    ASSERT_EQ(0, std::memcmp(l1.ptr(), lg.row(s), size_t(l1.cols()) * 4)) << what;
                }
            }
            for (int s = 0; s < 5; ++s) {
                ASSERT_EQ(alone[s].len, batched[s].len) << name;
                EXPECT_EQ(cache_bytes(alone[s]), cache_bytes(batched[s])) << name << " threads " << threads << " sequence " << s;
            }
            KvCache* twice[2] = {&batched[0], &batched[0]};
            EXPECT_THROW(dec.forward_batch(dec.embed({1, 2}), twice), Error);
        }
    }
    ops::set_num_threads(0);
    fs::remove_all(base);
}

// cpu::RowShares hands out every row exactly once: shares taken in chunks by their owners, single blocks stolen
// from the back, and when fewer threads than shares (or more) call run().
TEST(Kernels, RowSharesHandOutEveryRowOnce) {
    for (const int64_t N : {1, 15, 16, 17, 1000, 4099, 151936})
        for (const int nt : {1, 2, 3, 8})
            for (const int callers : {1, nt, nt + 1})
            for (const int64_t per_thread : {1, 8, 256}) {
                cpu::RowShares sh;
                sh.init(N, nt, per_thread);
                std::vector<std::atomic<int>> seen(static_cast<size_t>(N));
                std::vector<std::thread> team;
                for (int t = 0; t < callers; ++t)
                    team.emplace_back([&, t] {
                        sh.run(t, [&](int64_t r0, int64_t r1) {
                            ASSERT_LT(r0, r1);
                            for (int64_t r = r0; r < r1; ++r) seen[size_t(r)].fetch_add(1);
                        });
                    });
                for (auto& th : team) th.join();
                for (int64_t r = 0; r < N; ++r)
                    ASSERT_EQ(seen[size_t(r)].load(), 1) << "N " << N << " nt " << nt << " callers " << callers << " blocks " << per_thread
                                                        << " row " << r;
            }
}

// Decoder::forward over more than kRowBlock rows (a long piece's prefill) runs them block by block through the whole
// stack: the hidden states and the KV cache equal one pass over all rows (taken when a tap is passed), after a prefix
// already in the cache — bit for bit on the quantized path (bf16 cache: AMX attention where the CPU has it, head_dim
// 64), to float32 rounding on the float path (sgemm); the next step alike. A stop asked in the second block ends
// the pass with the cache at its length before it, and the pass after it is the unstopped one.
// The "small" preset (head_dim 64) in bf16 and 8-bit, written once per process.
static const std::string& small_checkpoints() {
    static const std::string base = [] {
        const std::string b = testing::TempDir() + "/qasr_blocks_" + std::to_string(::getpid());
        fs::remove_all(b);
        write_random_checkpoint(b + "/bf16", "small", "hf", 7, QASR_TOKENIZER_DIR);
        QuantizeOptions qo;
        qo.bits = 8;
        quantize_checkpoint(b + "/bf16", b + "/q8", qo);
        return b;
    }();
    static const struct Cleanup {
        ~Cleanup() { fs::remove_all(base); }
    } cleanup;
    return base;
}

static double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double md = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) md = std::max(md, std::fabs(double(a[i]) - double(b[i])));
    return md;
}

TEST(Kernels, LongPassInRowBlocksEqualsOnePass) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string& base = small_checkpoints();
    for (const std::string v : {"bf16", "q8"}) {
        SCOPED_TRACE(v);
        const auto m = Model::load(base + "/" + v, "cpu");
        const Decoder dec(m->weights.dec, m->hp.text);
        const int64_t D = m->hp.text.hidden, n = 2 * Decoder::kRowBlock + 300;
        std::mt19937 rng(11);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const auto rows = [&](int64_t r) {
            Tensor t({r, D});
            for (float& x : t.data) x = nd(rng);
            return t;
        };
        const Tensor prefix = rows(37), x = rows(n);
        const TapFn tap = [](const std::string&, const Tensor&) {}; // a tap: the one-pass path
        KvCache one, blocks;
        dec.forward(prefix, one);
        dec.forward(prefix, blocks);
        const Tensor h1 = dec.forward(x, one, &tap), h2 = dec.forward(x, blocks);
        ASSERT_EQ(one.len, 37 + n);
        ASSERT_EQ(blocks.len, 37 + n);
        // sgemm (the float path) rounds a row differently with the row count of the product, by an ulp or so: the
        // float path agrees to float32 rounding (the one pass against another row count does too); the quantized
        // path's products and attention give every row the same value whatever the count
        const auto& max_diff = max_abs_diff;
        // (bf16 products need an engine: AMX or AVX512-BF16; elsewhere the quantized path runs on sgemm as well)
        const bool exact = m->weights.dec.bf16_compute && std::string(ops::bf16_gemm_engine()) != "none";
        if (exact) {
            EXPECT_TRUE(h1.data == h2.data) << "hidden states differ by " << max_diff(h1.data, h2.data);
            EXPECT_TRUE(cache_bytes(one) == cache_bytes(blocks)) << "KV caches differ";
        } else {
            // float32 rounding carried through the layers: within 64 ulps of the largest hidden value (sgemm's tiles
            // of W set which sums round where; an error of the blocked path — a wrong KV offset, a skipped row — is
            // of the values' own size)
            double peak = 0;
            for (const float h : h1.data) peak = std::max(peak, double(std::fabs(h)));
            EXPECT_LT(max_diff(h1.data, h2.data), 64.0 * std::ldexp(peak, -23)) << "largest |h| " << peak;
        }
        const Tensor s1 = dec.forward(dec.embed({5}), one), s2 = dec.forward(dec.embed({5}), blocks);
        if (exact) {
            EXPECT_TRUE(s1.data == s2.data);
        } else {
            // relative to the step's largest value; the quantized matrix-vector products of the AVX2 table round x
            // to int16 (a step of 2^-15 of its largest value), so the caches' float32-rounding differences can move
            // a code and the step by ~1e-4 of its scale (3.3e-4 at 3.05 on an AVX2-only Zen 2); a wrong cache row
            // would move it by its whole scale
            double scale = 0;
            for (float e : s1.data) scale = std::max(scale, std::fabs(double(e)));
            const double rel = v == "q8" ? 5e-4 : 1e-5;
            EXPECT_LT(max_diff(s1.data, s2.data), rel * std::max(1.0, scale)) << "largest value " << scale;
        }
        // stopped in the second block (asked after every layer but the last of each block)
        const int L = int(m->hp.text.n_layers);
        KvCache c;
        dec.forward(prefix, c);
        int asks = 0;
        std::vector<double> told;
        const PassHook stop = [&](double done) { return told.push_back(done), ++asks == (L - 1) + 1; };
        EXPECT_EQ(dec.forward(x, c, nullptr, &stop).size(), 0u);
        EXPECT_EQ(asks, L); // the first block's asks, then the second block's first
        EXPECT_EQ(c.len, 37);
        // the fraction of the pass done, as the hook was told it: the first block's layers, then the second's first
        const double all = double(x.rows()), b0 = double(Decoder::kRowBlock);
        ASSERT_EQ(told.size(), size_t(L));
        for (int li = 0; li + 1 < L; ++li) EXPECT_NEAR(told[size_t(li)], b0 / all * (li + 1) / L, 1e-12);
        EXPECT_NEAR(told.back(), (b0 + std::min(b0, all - b0) / L) / all, 1e-12);
        const Tensor again = dec.forward(x, c);
        EXPECT_TRUE(again.data == h2.data) << "a pass after the stopped one";
    }
}

// encode_rows over more than kEncoderRowBlock rows runs blocks of whole attention windows through every layer: the
// same rows as one pass (taken when a tap is passed) — bit for bit where the encoder's products round to bf16
// (quantized checkpoints), to float32 rounding on sgemm; a stop asked in the second block ends it.
TEST(Kernels, LongEncoderPassInWindowBlocksEqualsOnePass) {
    if (!fs::exists(std::string(QASR_TOKENIZER_DIR) + "/tokenizer.json")) GTEST_SKIP() << "tokenizer not set up";
    const std::string& base = small_checkpoints();
    for (const std::string v : {"bf16", "q8"}) {
        SCOPED_TRACE(v);
        const auto m = Model::load(base + "/" + v, "cpu");
        const AudioHParams& hp = m->hp.audio;
        const int64_t window = encoder_window_rows(hp.chunk_frames(), hp), A = 2 * kEncoderRowBlock + 517;
        std::mt19937 rng(12);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        Tensor x({A, hp.d_model});
        for (float& e : x.data) e = nd(rng);
        const TapFn tap = [](const std::string&, const Tensor&) {};
        const Tensor one = encode_rows(m->weights.enc, hp, x, window, &tap), blocks = encode_rows(m->weights.enc, hp, x, window);
        ASSERT_EQ(one.shape, blocks.shape);
        EXPECT_EQ(m->weights.enc.bf16_compute, v == "q8");
        if (m->weights.enc.bf16_compute && std::string(ops::bf16_gemm_engine()) != "none") { // (else sgemm too)
            EXPECT_TRUE(one.data == blocks.data) << "rows differ by " << max_abs_diff(one.data, blocks.data);
        } else {
            EXPECT_LT(max_abs_diff(one.data, blocks.data), 1e-4);
        }
        const int L = int(m->weights.enc.layers.size());
        int asks = 0;
        std::vector<double> told;
        const PassHook stop = [&](double done) { return told.push_back(done), ++asks == L + 1; }; // the second block's first layer
        EXPECT_EQ(encode_rows(m->weights.enc, hp, x, window, nullptr, &stop).size(), 0u);
        EXPECT_EQ(asks, L + 1);
        const double block = double(std::max<int64_t>(1, kEncoderRowBlock / window) * window);
        for (int i = 0; i < L; ++i) EXPECT_NEAR(told[size_t(i)], block / double(A) * (i + 1) / L, 1e-12);
        EXPECT_NEAR(told[size_t(L)], (block + block / L) / double(A), 1e-12);
        EXPECT_TRUE(encode_rows(m->weights.enc, hp, x, window).data == blocks.data);
    }
}
