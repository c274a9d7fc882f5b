// The batched decode step's CUDA pieces (DeviceBatch): the row products on the tensor cores (bf16 and MLX-quantized
// weights), a batched step's rows against lone sessions' steps on every path, and the batch engine on the device
// with concurrent clients. Every test skips where no CUDA device is present (the binary's main is in test_cuda.cpp).
#include "api/transcriber_impl.hpp"
#include "model/quantize_checkpoint.hpp"
#include "cuda_test_util.hpp"

#include <atomic>
#include <thread>
#include <tuple>

using namespace qasr;
using namespace qasr::cuda;
using namespace qasr::cuda::test;

// The batched step's products (rows_product: B ≤ 16 rows on the tensor cores, the rows RMS-normalised and rounded
// to bf16 as the row passes' cuBLAS operands): every epilogue, 1 to 16 rows, the K of both model sizes, a grid that
// loops over tiles (the LM head's shape in small), against float64 sums of the same bf16 operands. W: [2N, K] on
// the device (m), wf its values as the kernel multiplies them.
static void check_rows_product(const DMat& m, const std::vector<float>& wf, int N, int K, int B, const std::string& what) {
    ASSERT_TRUE(rows_product_applies(m, B, Epi::SwiGLU)) << what;
    const std::vector<float> x = randv(size_t(B) * K, 6 + B), nw = randv(size_t(K), 7);
    const std::vector<float> y0 = randv(size_t(B) * 2 * N, 8);
    Dev dx(x), dn(nw);
    for (const bool norm : {true, false}) {
        std::vector<float> xr(x.size()); // the operand rows as the kernel rounds them
        for (int b = 0; b < B; ++b) {
            double ss = 0;
            for (int k = 0; k < K; ++k) ss += double(x[size_t(b) * K + k]) * x[size_t(b) * K + k];
            const float inv = norm ? 1.0f / std::sqrt(float(ss / K) + 1e-6f) : 1.0f;
            for (int k = 0; k < K; ++k)
                xr[size_t(b) * K + k] = bf16_round(norm ? x[size_t(b) * K + k] * inv * nw[size_t(k)] : x[size_t(b) * K + k]);
        }
        std::vector<float> ref(size_t(B) * 2 * N);
        for (int b = 0; b < B; ++b)
            for (int n = 0; n < 2 * N; ++n) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += double(wf[size_t(n) * K + k]) * xr[size_t(b) * K + k];
                ref[size_t(b) * 2 * N + n] = float(acc);
            }
        const float* np = norm ? dn.p<float>() : nullptr;
        const std::string at = what + ", " + std::to_string(B) + " rows, " + std::to_string(2 * N) + "x" +
                               std::to_string(K) + (norm ? " normed" : "");
        {
            Dev dy(y0);
            ASSERT_TRUE(rows_product(m, dx.p<float>(), B, np, 1e-6f, dy.p<float>(), 2 * N, Epi::Store, nullptr));
            EXPECT_LT(rel_l2(host(dy, size_t(B) * 2 * N), ref), 2e-3) << at << " store";
        }
        {
            Dev dy(y0);
            ASSERT_TRUE(rows_product(m, dx.p<float>(), B, np, 1e-6f, dy.p<float>(), 2 * N, Epi::Add, nullptr));
            std::vector<float> want = ref;
            for (size_t i = 0; i < want.size(); ++i) want[i] += y0[i];
            EXPECT_LT(rel_l2(host(dy, want.size()), want), 2e-3) << at << " add";
            // rows past B untouched: y0 beyond B rows is not there (ldy = 2N, B rows), checked by the sizes
        }
        {
            Dev dy(size_t(B) * N * 4);
            ASSERT_TRUE(rows_product(m, dx.p<float>(), B, np, 1e-6f, dy.p<float>(), N, Epi::SwiGLU, nullptr));
            std::vector<float> want(size_t(B) * N);
            for (int b = 0; b < B; ++b)
                for (int i = 0; i < N; ++i) {
                    const float gt = ref[size_t(b) * 2 * N + i], up = ref[size_t(b) * 2 * N + N + i];
                    want[size_t(b) * N + i] = gt / (1 + std::exp(-gt)) * up;
                }
            EXPECT_LT(rel_l2(host(dy, want.size()), want), 2e-3) << at << " swiglu";
        }
    }
}

TEST(Cuda, RowsProductMatchesCpuEveryEpilogueAndRowCount) {
    NEED_GPU();
    if (!device_has_mma()) GTEST_SKIP() << "rows_product needs sm_80";
    for (const auto& [N, K] : {std::pair<int, int>{64, 256}, {1024, 1024}, {520, 3072}, {24000, 1024}})
        for (const int B : {1, 3, 16}) {
            const Bf16Mat W(2 * N, K, 5);
            Dev dw(W.bits);
            DMat m;
            m.rows = 2 * N, m.cols = K, m.data = dw.p<void>();
            check_rows_product(m, W.f, N, K, B, "bf16");
        }
    // MLX-quantized weights (the 8/6/4-bit checkpoints' decoders and heads): dequantized in registers to the values
    // dequant_bf16 gives the cuBLAS path, bf16(scale·q + bias); group sizes 32, 64, 128
    for (const int bits : {8, 6, 4})
        for (const auto& [N, K, gs] : {std::tuple<int, int, int>{64, 256, 64}, {1024, 1024, 32}, {520, 3072, 128}})
            for (const int B : {1, 16}) {
                const QuantDevMat q(randv(size_t(2 * N) * K, 9, 0.1f), 2 * N, K, bits, gs);
                std::vector<float> wf = q.f;
                for (float& v : wf) v = bf16_round(v);
                check_rows_product(q.m, wf, N, K, B, std::to_string(bits) + "-bit gs " + std::to_string(gs));
            }
    // what it refuses: more than 16 rows, K not a multiple of 256, quantized weights without scales, 3-bit codes
    DMat m;
    m.rows = 64, m.cols = 1024, m.data = reinterpret_cast<void*>(uintptr_t(256));
    EXPECT_FALSE(rows_product_applies(m, 17, Epi::Store));
    m.cols = 1000;
    EXPECT_FALSE(rows_product_applies(m, 4, Epi::Store));
    m.cols = 1024, m.bits = 8, m.gs = 64;
    EXPECT_FALSE(rows_product_applies(m, 4, Epi::Store));
    m.scales = m.biases = reinterpret_cast<const bf16*>(uintptr_t(256));
    EXPECT_TRUE(rows_product_applies(m, 4, Epi::Store));
    m.bits = 3;
    EXPECT_FALSE(rows_product_applies(m, 4, Epi::Store));
}

// Batched decoding across requests on the device (DeviceBatch): each row of a batched step — rows of sessions at
// different lengths, the batch shrinking and growing between steps, eager and captured steps — chooses the token a
// lone session's step chooses (teacher-forced: both are fed the lone session's tokens), except at a near-tie of its
// logits, with that token's log-probability; and misuse is an error, not a crash. The batched products take bf16
// operands (as the prefill's), the lone step's matrix-vector products float32 activations: logits differ by
// ~1e-3, so a near-tie is a top-2 gap under 2e-2, and log-probabilities agree within 1e-2 (2e-2 for 4-bit weights;
// the measured figures are below).
// Paths: "wide" (row products on the tensor cores + the batched attention kernel; with QASR_CUDA_ROWS_ATTN=0 the fused
// single-row attention kernel per row), "wide" 8-bit (the row products dequantizing MLX codes), "wide" with
// QASR_CUDA_ROWS_MMA=0 in bf16 and 4-bit (the cuBLAS path — quantized weights dequantized first — with the batched
// attention kernel), "tiny" (head_dim 32, widths the row products do not take: the cuBLAS path and the
// row-per-warp attention).
// chosen: each checked choice's log-probability (NaN where the batched row chose another token), in order.
static void batched_rows_match_lone_steps(const std::string& preset, bool rows_attn, bool rows_mma = true, int bits = 16,
                                   std::vector<float>* chosen = nullptr) {
    const std::string tok_dir = tokenizer_dir();
    struct Env {
        Env(bool attn, bool mma) {
            if (!attn) setenv("QASR_CUDA_ROWS_ATTN", "0", 1);
            if (!mma) setenv("QASR_CUDA_ROWS_MMA", "0", 1);
        }
        ~Env() { unsetenv("QASR_CUDA_ROWS_ATTN"), unsetenv("QASR_CUDA_ROWS_MMA"); }
    } env(rows_attn, rows_mma);
    std::string dir = random_checkpoint_dir(preset, 1, tok_dir);
    if (bits < 16) {
        const std::string q = dir + "_q" + std::to_string(bits);
        QuantizeOptions qo;
        qo.bits = bits;
        if (!std::filesystem::exists(q + "/config.json")) quantize_checkpoint(dir, q, qo);
        dir = q;
    }
    const auto gpu = Model::load(dir, "cuda");
    ASSERT_TRUE(gpu->device);
    const int kRows = 3, kSteps = 14;
    std::unique_ptr<DeviceBatch> batch = gpu->device->open_batch(4);
    ASSERT_TRUE(batch);
    EXPECT_EQ(batch->max_batch(), 4);
    TranscribeOptions o;
    o.itn = false;
    o.decode.ignore_eos = true;
    o.decode.max_new_tokens = kSteps + 2;
    std::vector<std::unique_ptr<Session>> lone, rows;
    std::vector<Tensor> logits(kRows);
    std::vector<int> fed(kRows);
    int near_ties = 0, checked = 0;
    double worst_lp = 0; // largest |Δ log-probability| of a chosen token
    // The lone step's log-probabilities come from float32 activations and (quantized) weights dequantized in
    // float32, the batched step's from bf16 operands: measured within 5.9e-3 (bf16), 7.7e-3 (8-bit) and 1.39e-2
    // (4-bit: the same in the row products and the cuBLAS path, H200) — hence the per-width tolerance, and the
    // test below that holds the two 4-bit paths to each other.
    const std::string where = preset + (bits < 16 ? " " + std::to_string(bits) + "-bit" : "") +
                              (rows_attn ? "" : " (QASR_CUDA_ROWS_ATTN=0)") + (rows_mma ? "" : " (QASR_CUDA_ROWS_MMA=0)");
    const auto top2_gap = [](const Tensor& l) {
        std::vector<float> v(l.ptr(), l.ptr() + l.cols());
        std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
        return v[0] - v[1];
    };
    // row b's choice against the lone session's logits; returns the token both are fed next (the lone one's)
    const auto check = [&](int b, int id, float lp, const std::string& what) {
        const Tensor& l = logits[size_t(b)];
        const int want = int(std::max_element(l.ptr(), l.ptr() + l.cols()) - l.ptr());
        ++checked;
        if (chosen) chosen->push_back(id == want ? lp : NAN);
        if (id != want) {
            EXPECT_LT(top2_gap(l), 2e-2f) << where << " " << what << " row " << b << ": " << id << " vs " << want
                                          << " without a near-tie";
            ++near_ties;
        } else if (!std::isnan(lp)) {
            double lse = 0;
            const float mx = l.ptr()[want];
            for (int64_t i = 0; i < l.cols(); ++i) lse += std::exp(double(l.ptr()[i] - mx));
            EXPECT_NEAR(lp, -std::log(lse), bits == 4 ? 2e-2 : 1e-2) << where << " " << what << " row " << b;
            worst_lp = std::max(worst_lp, std::abs(double(lp) + std::log(lse)));
        }
        return want;
    };
    for (int b = 0; b < kRows; ++b) {
        const std::vector<float> audio = randv(size_t(16000 * (2 + b)), 40 + b, 0.1f); // prompts of three lengths
        lone.push_back(std::make_unique<Session>(gpu));
        Session& ls = *lone.back();
        const Tensor rows_enc = ls.encode(ls.mel(audio, 8000));
        logits[size_t(b)] = ls.prefill(ls.prompt(rows_enc.rows(), o), rows_enc);
        rows.push_back(std::make_unique<Session>(gpu));
        ASSERT_TRUE(rows.back()->begin(audio, o));
        ASSERT_TRUE(rows.back()->device_greedy());
        // the first token (the prefill's choice)
        fed[size_t(b)] = check(b, rows.back()->begin_device_batch(), NAN, "first token");
    }
    // steps 0–4 with all three rows, 5–8 without row 1 (it left), 9–10 row 2 alone (a batch of one: the session's
    // own step graph), 11– rows 2 and 0 swapped back in
    for (int n = 0; n < kSteps; ++n) {
        std::vector<int> active = n < 5 ? std::vector<int>{0, 1, 2} : n < 9 ? std::vector<int>{0, 2}
                                  : n < 11 ? std::vector<int>{2} : std::vector<int>{2, 0};
        std::vector<Session*> ss;
        std::vector<int> toks, ids(active.size());
        std::vector<float> lps(active.size());
        for (int b : active) ss.push_back(rows[size_t(b)].get()), toks.push_back(fed[size_t(b)]);
        Session::step_batch_device(ss.data(), toks.data(), ss.size(), *batch, ids.data(), lps.data());
        for (size_t k = 0; k < active.size(); ++k) {
            const int b = active[k];
            logits[size_t(b)] = lone[size_t(b)]->step(fed[size_t(b)]);
            fed[size_t(b)] = check(b, ids[k], lps[k], "step " + std::to_string(n));
        }
    }
    std::printf("batched rows, %s: %d choices checked, %d at near-ties, log-probabilities within %.2e\n",
                where.c_str(), checked, near_ties, worst_lp);
    EXPECT_LE(near_ties, checked / 10) << where;
    // misuse: more rows than the batch holds, a session that has not made room, a token outside the vocabulary
    std::vector<Session*> five(5, rows[0].get());
    std::vector<int> t5(5, 1), i5(5);
    std::vector<float> l5(5);
    EXPECT_THROW(Session::step_batch_device(five.data(), t5.data(), 5, *batch, i5.data(), l5.data()), Error);
    Session idle(gpu);
    Session* idle_p = &idle;
    EXPECT_THROW(Session::step_batch_device(&idle_p, t5.data(), 1, *batch, i5.data(), l5.data()), Error);
    Session* r0 = rows[0].get();
    const int bad = int(gpu->hp.text.vocab_size);
    EXPECT_THROW(Session::step_batch_device(&r0, &bad, 1, *batch, i5.data(), l5.data()), Error);
}

// One test per path, so that a sanitizer run (compute-sanitizer racecheck is slow on cuBLAS's kernels) can take
// them one at a time: `--gtest_filter='Cuda.BatchedStep*'`.
#define NEED_BATCH_SETUP()                                                                                            \
    NEED_GPU();                                                                                                       \
    if (!std::filesystem::exists(tokenizer_dir() + "/tokenizer.json"))                                                \
    GTEST_SKIP() << "tokenizer not set up (scripts/setup_tokenizer.sh) in " << tokenizer_dir()

TEST(Cuda, BatchedStepRowProductsMatchLoneSessionSteps) {
    NEED_BATCH_SETUP();
    batched_rows_match_lone_steps("wide", true);
}

TEST(Cuda, BatchedStepRowPerWarpAttentionMatchesLoneSessionSteps) {
    NEED_BATCH_SETUP();
    batched_rows_match_lone_steps("wide", false);
}

TEST(Cuda, BatchedStepCublasPathMatchesLoneSessionSteps) {
    NEED_BATCH_SETUP();
    batched_rows_match_lone_steps("wide", true, false); // the cuBLAS path with the rows' attention kernel
}

TEST(Cuda, BatchedStepQuantizedMatchesLoneSessionSteps) {
    NEED_BATCH_SETUP();
    batched_rows_match_lone_steps("wide", true, true, 8); // quantized weights on the row products
    // 4-bit on the row products and dequantized for the cuBLAS path: the same bf16 weights; an activation's bf16
    // rounding can differ by one step where the two paths' RMSNorm sums (other orders) differ in the last bit —
    // measured within 3.2e-3 of each other (H200), against 1.39e-2 for each from the lone step
    std::vector<float> fast, cublas;
    batched_rows_match_lone_steps("wide", true, true, 4, &fast);
    batched_rows_match_lone_steps("wide", true, false, 4, &cublas);
    ASSERT_EQ(fast.size(), cublas.size());
    for (size_t i = 0; i < fast.size(); ++i) {
        if (std::isnan(fast[i]) || std::isnan(cublas[i])) continue;
        EXPECT_NEAR(fast[i], cublas[i], 5e-3) << "choice " << i;
    }
}

TEST(Cuda, BatchedStepTinyHeadsMatchLoneSessionSteps) {
    NEED_BATCH_SETUP();
    batched_rows_match_lone_steps("tiny", true); // head_dim 32: the cuBLAS path's row-per-warp attention
}

// The trained demo model ($QASR_DEMO_DIR, else models/demo) and its held-out clips, sorted; false when either is
// missing (dir is set for the message).
static bool demo_model_clips(std::string& dir, std::vector<std::string>& wavs) {
    const char* env = std::getenv("QASR_DEMO_DIR");
    dir = env && *env ? env : std::string(QASR_SOURCE_DIR) + "/models/demo";
    const std::string clips = dir + "/../../tests/data/demo_testset";
    if (!std::filesystem::exists(dir + "/tokenizer.json") || !std::filesystem::exists(clips)) return false;
    for (const auto& e : std::filesystem::directory_iterator(clips))
        if (e.path().extension() == ".wav") wavs.push_back(e.path().string());
    std::sort(wavs.begin(), wavs.end());
    return true;
}

// The batch engine on the device (LoadOptions::max_batch with --device cuda): concurrent clients, each request's
// encoder and prefill on its own stream and the decode steps batched, get the transcripts the model gives one
// request at a time (the trained demo model: no near-ties), and sampled requests still run on their own.
TEST(Cuda, BatchEngineGivesEveryClientItsTranscript) {
    NEED_GPU();
    std::string dir;
    std::vector<std::string> wavs;
    if (!demo_model_clips(dir, wavs))
        GTEST_SKIP() << "demo model with tokenizer, or its test clips, not found in " << dir << " (set QASR_DEMO_DIR)";
    wavs.resize(std::min<size_t>(wavs.size(), 24));
    LoadOptions lo;
    lo.device = "cuda";
    const Transcriber alone = Transcriber::load(dir, lo);
    lo.max_batch = 6;
    const Transcriber t = Transcriber::load(dir, lo);
    TranscribeOptions o;
    o.itn = false;
    std::vector<std::string> want(wavs.size()), got(wavs.size());
    for (size_t i = 0; i < wavs.size(); ++i) want[i] = alone.transcribe_file(wavs[i], o).raw_text;
    TranscribeOptions sampled = o;
    sampled.decode.temperature = 0.8f;
    sampled.decode.seed = 7;
    const int kThreads = 8;
    std::vector<std::string> sampled_got(kThreads);
    std::vector<int> empty(kThreads, -1);
    std::vector<std::thread> th;
    for (int k = 0; k < kThreads; ++k)
        th.emplace_back([&, k] {
            try {
                for (size_t i = size_t(k); i < wavs.size(); i += kThreads) got[i] = t.transcribe_file(wavs[i], o).raw_text;
                sampled_got[size_t(k)] = t.transcribe_file(wavs[0], sampled).raw_text;
                empty[size_t(k)] = int(t.transcribe(std::vector<float>(100, 0.1f), o).finish);
            } catch (const std::exception& e) {
                got[size_t(k)] = std::string("error: ") + e.what();
            }
        });
    for (auto& x : th) x.join();
    for (size_t i = 0; i < wavs.size(); ++i) EXPECT_EQ(got[i], want[i]) << wavs[i];
    for (int k = 0; k < kThreads; ++k) {
        EXPECT_FALSE(sampled_got[size_t(k)].empty()) << "client " << k;
        EXPECT_EQ(empty[size_t(k)], int(FinishReason::Empty)) << "client " << k;
    }
    const BatchEngine::Stats st = t.impl().engine->stats();
    std::printf("device engine: %ld steps, %.2f rows per step, largest batch %d\n", st.steps,
                st.steps ? double(st.rows) / double(st.steps) : 0.0, st.max_batch_seen);
    EXPECT_GE(st.max_batch_seen, 2);
    EXPECT_LE(st.max_batch_seen, 6);
}

// TranscribeOptions::language_only on the device: the greedy loop runs one step ahead of the host's stop checks, so
// the step after the language tag may already be queued; the result must still stop at the tag — the language and
// the first tokens of the full transcription, their probability, an empty text — alone and through the batch engine.
TEST(Cuda, LanguageOnlyStopsAtTheTagOnTheDevice) {
    NEED_GPU();
    std::string dir;
    std::vector<std::string> wavs;
    if (!demo_model_clips(dir, wavs))
        GTEST_SKIP() << "demo model with tokenizer, or its test clips, not found in " << dir << " (set QASR_DEMO_DIR)";
    LoadOptions lo;
    lo.device = "cuda";
    const Transcriber t = Transcriber::load(dir, lo);
    lo.max_batch = 4;
    const Transcriber tb = Transcriber::load(dir, lo);
    TranscribeOptions full, lid;
    lid.language_only = true;
    int checked = 0;
    for (size_t i = 0; i < wavs.size(); i += 7) {
        const auto f = t.transcribe_file(wavs[i], full);
        const auto l = t.transcribe_file(wavs[i], lid);
        EXPECT_EQ(l.language, f.language) << wavs[i];
        EXPECT_TRUE(l.text.empty()) << wavs[i] << ": " << l.text;
        ASSERT_GE(l.tokens.size(), 2u) << wavs[i];
        EXPECT_LE(l.tokens.size(), 5u) << wavs[i];
        for (size_t k = 0; k < l.tokens.size() && k < f.tokens.size(); ++k)
            EXPECT_EQ(l.tokens[k].id, f.tokens[k].id) << wavs[i] << " " << k;
        EXPECT_GT(l.language_probability, 0.5) << wavs[i];
        EXPECT_NEAR(l.language_probability, f.language_probability, 1e-4) << wavs[i];
        const auto b = tb.transcribe_file(wavs[i], lid);
        EXPECT_EQ(b.language, l.language) << wavs[i];
        EXPECT_EQ(b.tokens.size(), l.tokens.size()) << wavs[i];
        ++checked;
    }
    std::printf("language_only on the device: %d clips\n", checked);
    EXPECT_GE(checked, 5);
}

// TranscribeOptions::abort on the device: the greedy loop (one step queued ahead), the batch engine's steps and a
// beam search stop at the call that answered true (Cancelled), and the pooled device sessions and batches then
// give the next request exactly the tokens they gave before the cancellation.
TEST(Cuda, AbortStopsTheDeviceLoopsAndTheNextRequestIsAlike) {
    NEED_GPU();
    const std::string tiny = random_checkpoint_dir("tiny", 1, tokenizer_dir());
    const std::vector<float> audio = randv(16000 * 4, 41, 0.1f);
    std::atomic<int> calls{0}, stop_at{0};
    TranscribeOptions o;
    o.itn = false;
    o.decode.max_new_tokens = 160; // random weights write no EOS: the cap
    o.decode.repetition_limit = 0;
    o.abort = [&] { return ++calls >= stop_at && stop_at > 0; };
    const auto ids = [](const TranscriptionResult& r) {
        std::vector<int> v;
        for (const auto& t : r.tokens) v.push_back(t.id);
        return v;
    };
    for (const int batch : {1, 4}) {
        LoadOptions lo;
        lo.device = "cuda";
        lo.max_batch = batch;
        const Transcriber t = Transcriber::load(tiny, lo);
        for (const int beams : {1, 3}) {
            TranscribeOptions ob = o;
            ob.decode.beam_size = beams;
            calls = 0;
            stop_at = 0;
            const TranscriptionResult full = t.transcribe(audio, ob);
            ASSERT_EQ(full.tokens.size(), 160u) << "batch " << batch << " beams " << beams;
            const int total = calls;
            EXPECT_GE(total, 160) << "asked before every token";
            for (const int k : {2, total / 2, total - 1}) {
                calls = 0;
                stop_at = k;
                EXPECT_THROW(t.transcribe(audio, ob), Cancelled) << "batch " << batch << " beams " << beams << " stop " << k;
                EXPECT_EQ(calls.load(), k) << "asked again after it answered true";
            }
            stop_at = 0;
            EXPECT_EQ(ids(t.transcribe(audio, ob)), ids(full)) << "batch " << batch << " beams " << beams;
        }
    }
}

// Device memory between requests: a session that ends holding more than the pool limit in its length-dependent
// buffers (QASR_CUDA_POOL_LIMIT_MB) is freed rather than pooled, and an allocation that finds the device full frees
// the idle pooled sessions before it gives up (qasr::OutOfMemory when even that is not enough). The requests after
// either give the tokens they gave before.
TEST(Cuda, LongRequestsLeaveThePoolAndIdleSessionsYieldToAnAllocation) {
    NEED_GPU();
    const std::string tiny = random_checkpoint_dir("tiny", 1, tokenizer_dir());
    const std::vector<float> short_audio = randv(16000 * 4, 41, 0.1f), long_audio = randv(16000 * 300, 42, 0.1f);
    TranscribeOptions o;
    o.itn = false;
    o.decode.max_new_tokens = 32;
    o.decode.repetition_limit = 0;
    TranscribeOptions ol = o; // a long request: room for its token cap is reserved on the device (~60 MB of KV
    ol.decode.max_new_tokens = 60000; // cache here; with its 300 s prompt within the model's 65536 positions); it is
                                      // cancelled after 64 tokens (random weights write no EOS)
    int asked = 0;
    ol.abort = [&asked] { return ++asked > 64; };
    const auto run_long = [&](const Transcriber& t) {
        asked = 0;
        EXPECT_THROW(t.transcribe(long_audio, ol), Cancelled);
    };
    const auto ids = [](const TranscriptionResult& r) {
        std::vector<int> v;
        for (const auto& t : r.tokens) v.push_back(t.id);
        return v;
    };
    LoadOptions lo;
    lo.device = "cuda";
    ::setenv("QASR_CUDA_POOL_LIMIT_MB", "16", 1);
    const Transcriber limited = Transcriber::load(tiny, lo);
    ::unsetenv("QASR_CUDA_POOL_LIMIT_MB");
    const DeviceContext& dev = *limited.impl().model->device;
    const auto first = limited.transcribe(short_audio, o);
    ASSERT_EQ(first.tokens.size(), 32u);
    const size_t held = dev.pooled_bytes();
    EXPECT_GT(held, 0u);
    EXPECT_LE(held, size_t(16) << 20) << "a short request's session is pooled";
    run_long(limited);
    EXPECT_EQ(dev.pooled_bytes(), 0u) << "the long request's session was kept";
    EXPECT_EQ(ids(limited.transcribe(short_audio, o)), ids(first));
    EXPECT_GT(dev.pooled_bytes(), 0u);
    EXPECT_LE(dev.pooled_bytes(), size_t(16) << 20);

    const Transcriber t = Transcriber::load(tiny, lo); // the default limit: the long request's session is pooled
    const DeviceContext& dev2 = *t.impl().model->device;
    run_long(t);
    const size_t pooled = dev2.pooled_bytes();
    ASSERT_GT(pooled, size_t(100) << 20);
    size_t free_b = 0, total_b = 0;
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    Buffer hog(free_b - (size_t(64) << 20)); // the device all but full
    ASSERT_EQ(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
    ASSERT_LT(free_b + (size_t(16) << 20), pooled) << "the test needs the pooled session to hold more than is free";
    Buffer more(free_b + (size_t(16) << 20)); // fits only once the idle session is freed
    EXPECT_EQ(dev2.pooled_bytes(), 0u);
    EXPECT_THROW(Buffer too_big(total_b), OutOfMemory); // more than the device has: the type a server answers 503 to
    more.reset();
    hog.reset();
    EXPECT_EQ(ids(t.transcribe(short_audio, o)), ids(first));
}
