// CUDA attention and greedy-choice kernels against the CPU ops: q/k-norm + RoPE, the tiled prefill/encoder
// attention, the fused decode attention, the argmax and the streaming LM head with its argmax partials. Every test
// skips where no CUDA device is present (the binary's main is in test_cuda.cpp).
#include "cuda_test_util.hpp"

using namespace qasr;
using namespace qasr::cuda;
using namespace qasr::cuda::test;

TEST(Cuda, QkNormRopeAndAttentionMatchCpu) {
    NEED_GPU();
    const int Hq = 4, Hkv = 2, hd = 64, n = 37, W = (Hq + 2 * Hkv) * hd;
    const std::vector<float> qkv = randv(size_t(n * W), 10), qn = randv(size_t(hd), 11), kn = randv(size_t(hd), 12);
    std::vector<float> inv(size_t(hd / 2));
    for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, 2.0 * i / hd));
    // CPU: split, q/k norm, RoPE at positions 0..n-1, causal attention
    std::vector<float> q(size_t(n * Hq * hd)), k(size_t(n * Hkv * hd)), v(size_t(n * Hkv * hd));
    for (int r = 0; r < n; ++r) {
        std::memcpy(&q[size_t(r * Hq * hd)], &qkv[size_t(r * W)], size_t(Hq * hd) * 4);
        std::memcpy(&k[size_t(r * Hkv * hd)], &qkv[size_t(r * W + Hq * hd)], size_t(Hkv * hd) * 4);
        std::memcpy(&v[size_t(r * Hkv * hd)], &qkv[size_t(r * W + (Hq + Hkv) * hd)], size_t(Hkv * hd) * 4);
    }
    ops::rms_norm(q.data(), n * Hq, hd, qn.data(), 1e-6f);
    ops::rms_norm(k.data(), n * Hkv, hd, kn.data(), 1e-6f);
    ops::rope(q.data(), n, Hq, hd, 0, inv.data());
    ops::rope(k.data(), n, Hkv, hd, 0, inv.data());
    std::vector<float> o(size_t(n * Hq * hd));
    ops::causal_attention(q.data(), k.data(), v.data(), o.data(), n, 0, Hq, Hkv, hd);

    Dev dqkv(qkv), dqn(qn), dkn(kn), dinv(inv), dq(q.size() * 4), dk(k.size() * 4), dv(v.size() * 4), dout(o.size() * 4);
    qk_norm_rope_kv(dqkv.p<float>(), n, nullptr, Hq, Hkv, hd, dqn.p<float>(), dkn.p<float>(), 1e-6f, dinv.p<float>(),
                    dq.p<float>(), dk.p<float>(), dv.p<float>(), nullptr);
    EXPECT_LT(rel_l2(host(dq, q.size()), q), 1e-5);
    EXPECT_LT(rel_l2(host(dk, k.size()), k), 1e-5);
    EXPECT_LT(rel_l2(host(dv, v.size()), v), 1e-7);
    AttnArgs a;
    a.q = dq.p<float>(), a.q_stride = Hq * hd, a.k = dk.p<float>(), a.v = dv.p<float>(), a.kv_stride = Hkv * hd;
    a.o = dout.p<float>(), a.o_stride = Hq * hd, a.n = n, a.heads = Hq, a.kv_heads = Hkv, a.hd = hd;
    set_attention_mma(false); // float32 arithmetic
    attention(a, nullptr);
    EXPECT_LT(rel_l2(host(dout, o.size()), o), 1e-5);
    set_attention_mma(true); // TF32 tensor cores (TensorCoreAttentionMatchesCpu)
    attention(a, nullptr);
    EXPECT_LT(rel_l2(host(dout, o.size()), o), 2e-3);
    // decode form: the last row alone at position n-1 (past read from the device), keys split 16 ways
    const std::vector<int> past{n - 1};
    Dev dpast(past), dpart(size_t(Hq) * 16 * (hd + 2) * 4), d1(size_t(Hq * hd) * 4);
    a.q = dq.p<float>() + size_t(n - 1) * Hq * hd, a.n = 1, a.past = dpast.p<int>(), a.splits = 16;
    a.part = dpart.p<float>(), a.o = d1.p<float>();
    attention(a, nullptr);
    const std::vector<float> last(o.end() - Hq * hd, o.end());
    EXPECT_LT(rel_l2(host(d1, size_t(Hq * hd)), last), 1e-5);
    // windowed (encoder) form: windows of 10 rows, no GQA, q/k/v interleaved in one [n, 3·d] buffer
    const int heads = 2, ehd = 16, d = heads * ehd;
    const std::vector<float> x = randv(size_t(n * 3 * d), 13);
    std::vector<float> eq(size_t(n * d)), ek(size_t(n * d)), ev(size_t(n * d)), eo(size_t(n * d));
    for (int r = 0; r < n; ++r)
        for (int c = 0; c < d; ++c) {
            eq[size_t(r * d + c)] = x[size_t(r * 3 * d + c)];
            ek[size_t(r * d + c)] = x[size_t(r * 3 * d + d + c)];
            ev[size_t(r * d + c)] = x[size_t(r * 3 * d + 2 * d + c)];
        }
    ops::windowed_attention(eq.data(), ek.data(), ev.data(), eo.data(), n, heads, ehd, 10);
    Dev dx(x), deo(eo.size() * 4);
    AttnArgs w;
    w.q = dx.p<float>(), w.k = dx.p<float>() + d, w.v = dx.p<float>() + 2 * d, w.q_stride = w.kv_stride = 3 * d;
    w.o = deo.p<float>(), w.o_stride = d, w.n = n, w.heads = w.kv_heads = heads, w.hd = ehd, w.causal = false, w.window = 10;
    attention(w, nullptr);
    EXPECT_LT(rel_l2(host(deo, eo.size()), eo), 1e-5);
}

// The many-row attention cases (prefill, encoder) of both tiled kernels: causal with GQA from position 0 and after
// earlier positions (extend), windowed with windows that do and do not align with the tiles, one to many key tiles.
struct AttnCase {
    int heads, kv_heads, hd, n, past, window;
    std::string name() const {
        return "heads " + std::to_string(heads) + "/" + std::to_string(kv_heads) + " hd " + std::to_string(hd) + " n " +
               std::to_string(n) + " past " + std::to_string(past) + " window " + std::to_string(window);
    }
    static std::vector<float> rows(int n, int width, uint32_t seed, float scale) { return randv(size_t(n) * width, seed, scale); }
};
const AttnCase kAttnCases[] = {{16, 8, 128, 158, 0, 0}, {16, 8, 128, 45, 149, 0}, {4, 2, 64, 37, 21, 0},
                               {14, 14, 64, 143, 0, 104}, {2, 2, 64, 61, 0, 13},  {16, 8, 128, 2, 5, 0},
                               {16, 8, 128, 300, 0, 0},  {4, 4, 64, 250, 0, 200}, {16, 8, 128, 17, 0, 0}};

// The tiled many-row attention (float32 arithmetic) against the CPU ops over kAttnCases.
TEST(Cuda, TiledAttentionMatchesCpu) {
    NEED_GPU();
    set_attention_mma(false); // the float32 kernel; the tensor-core one: TensorCoreAttentionMatchesCpu
    for (const AttnCase& c : kAttnCases) {
        SCOPED_TRACE(c.name());
        const int tot = c.past + c.n, qw = c.heads * c.hd, kw = c.kv_heads * c.hd;
        const uint32_t sd = uint32_t(c.n * 7 + c.past + c.hd);
        const std::vector<float> q = c.rows(c.n, qw, sd, 2.0f), k = c.rows(tot, kw, sd + 1, 2.0f), v = c.rows(tot, kw, sd + 2, 1.0f);
        std::vector<float> o(size_t(c.n * qw));
        if (c.window) ops::windowed_attention(q.data(), k.data(), v.data(), o.data(), c.n, c.heads, c.hd, c.window);
        else ops::causal_attention(q.data(), k.data(), v.data(), o.data(), c.n, c.past, c.heads, c.kv_heads, c.hd);
        Dev dq(q), dk(k), dv(v), dpast(std::vector<int>{c.past}), dout(o.size() * 4);
        AttnArgs a;
        a.q = dq.p<float>(), a.q_stride = qw, a.k = dk.p<float>(), a.v = dv.p<float>(), a.kv_stride = kw;
        a.o = dout.p<float>(), a.o_stride = qw, a.n = c.n, a.heads = c.heads, a.kv_heads = c.kv_heads, a.hd = c.hd;
        if (c.window) a.causal = false, a.window = c.window;
        else a.past = dpast.p<int>();
        attention(a, nullptr);
        EXPECT_LT(rel_l2(host(dout, o.size()), o), 1e-5);
        // the host's count of keys (past + n) picks the key splits merged in a cluster (2–8 here for the longer
        // cases); the bf16 output is the float32 output rounded
        a.keys_hint = tot;
        attention(a, nullptr);
        const std::vector<float> o2 = host(dout, o.size());
        EXPECT_LT(rel_l2(o2, o), 1e-5) << "with the key count";
        Dev dob(o.size() * 2);
        a.ob = dob.p<__nv_bfloat16>();
        attention(a, nullptr);
        EXPECT_EQ(bf16_mismatches(dob, o2), 0u) << "bf16 output differs from the rounded float32 output";
        // q/k/v biases added on load (the encoder's): bit for bit the attention over the biased rows
        const std::vector<float> bq = randv(size_t(qw), sd + 3), bk = randv(size_t(kw), sd + 4), bv = randv(size_t(kw), sd + 5);
        std::vector<float> q2 = q, k2 = k, v2 = v;
        for (size_t i = 0; i < q2.size(); ++i) q2[i] += bq[i % size_t(qw)];
        for (size_t i = 0; i < k2.size(); ++i) k2[i] += bk[i % size_t(kw)], v2[i] += bv[i % size_t(kw)];
        Dev dq2(q2), dk2(k2), dv2(v2), dbq(bq), dbk(bk), dbv(bv);
        AttnArgs b = a;
        b.ob = nullptr, b.q = dq2.p<float>(), b.k = dk2.p<float>(), b.v = dv2.p<float>();
        attention(b, nullptr);
        const std::vector<float> want = host(dout, o.size());
        a.ob = nullptr, a.bq = dbq.p<float>(), a.bk = dbk.p<float>(), a.bv = dbv.p<float>();
        ASSERT_TRUE(attention_tiled(a));
        attention(a, nullptr);
        EXPECT_EQ(host(dout, o.size()), want);
    }
    AttnArgs one; // one row: not the tiled kernel, so biases are refused
    one.n = 1, one.heads = one.kv_heads = 2, one.hd = 64, one.q_stride = one.kv_stride = one.o_stride = 128;
    one.bq = one.bk = one.bv = reinterpret_cast<const float*>(uintptr_t(256));
    EXPECT_FALSE(attention_tiled(one));
    EXPECT_ANY_THROW(attention(one, nullptr));
    set_attention_mma(true);
}

// The same cases on the tensor cores (attention_mma.cu: TF32 products, float32 accumulation). TF32 keeps 10
// mantissa bits, so the output is within ~1e-3 (relative L2) of the float32 CPU ops, the size of the bf16 rounding
// the o product's operand gets anyway (rel. L2 of rounding these outputs to bf16 is printed alongside); biases
// (bq on load, bk dropped by softmax's shift invariance, bv on the output) against the CPU over the biased rows.
TEST(Cuda, TensorCoreAttentionMatchesCpu) {
    NEED_GPU();
    set_attention_mma(true);
    // 40-key tiles where they save the longest row tile a round (the 158- and 300-row cases) and 32-key tiles always
    for (const bool kt40 : {true, false})
    for (const AttnCase& c : kAttnCases) {
        set_attention_kt40(kt40);
        SCOPED_TRACE(c.name() + (kt40 ? " (40-key tiles allowed)" : " (32-key tiles)"));
        const int tot = c.past + c.n, qw = c.heads * c.hd, kw = c.kv_heads * c.hd;
        const uint32_t sd = uint32_t(c.n * 5 + c.past + c.hd);
        const std::vector<float> q = c.rows(c.n, qw, sd, 2.0f), k = c.rows(tot, kw, sd + 1, 2.0f), v = c.rows(tot, kw, sd + 2, 1.0f);
        const std::vector<float> bq = randv(size_t(qw), sd + 3), bk = randv(size_t(kw), sd + 4), bv = randv(size_t(kw), sd + 5);
        std::vector<float> q2 = q, k2 = k, v2 = v;
        for (size_t i = 0; i < q2.size(); ++i) q2[i] += bq[i % size_t(qw)];
        for (size_t i = 0; i < k2.size(); ++i) k2[i] += bk[i % size_t(kw)], v2[i] += bv[i % size_t(kw)];
        for (const bool bias : {false, true}) {
            std::vector<float> o(size_t(c.n * qw));
            const float *qs = bias ? q2.data() : q.data(), *ks = bias ? k2.data() : k.data(), *vs = bias ? v2.data() : v.data();
            if (c.window) ops::windowed_attention(qs, ks, vs, o.data(), c.n, c.heads, c.hd, c.window);
            else ops::causal_attention(qs, ks, vs, o.data(), c.n, c.past, c.heads, c.kv_heads, c.hd);
            Dev dq(q), dk(k), dv(v), dpast(std::vector<int>{c.past}), dout(o.size() * 4), dbq(bq), dbk(bk), dbv(bv);
            AttnArgs a;
            a.q = dq.p<float>(), a.q_stride = qw, a.k = dk.p<float>(), a.v = dv.p<float>(), a.kv_stride = kw;
            a.o = dout.p<float>(), a.o_stride = qw, a.n = c.n, a.heads = c.heads, a.kv_heads = c.kv_heads, a.hd = c.hd;
            a.keys_hint = tot;
            if (c.window) a.causal = false, a.window = c.window;
            else a.past = dpast.p<int>();
            if (bias) a.bq = dbq.p<float>(), a.bk = dbk.p<float>(), a.bv = dbv.p<float>();
            ASSERT_TRUE(attention_mma(a, nullptr)) << "the tensor-core kernel applies here";
            const std::vector<float> got = host(dout, o.size());
            std::vector<float> rounded(o.size());
            for (size_t i = 0; i < o.size(); ++i) rounded[i] = __bfloat162float(__float2bfloat16(o[i]));
            const double err = rel_l2(got, o), bf = rel_l2(rounded, o);
            std::printf("    %s: rel. L2 %.2e (bf16 rounding of the output: %.2e)\n", bias ? "biases" : "plain", err, bf);
            EXPECT_LT(err, 2e-3);
            // the bf16 output is the float32 output rounded
            Dev dob(o.size() * 2);
            a.ob = dob.p<__nv_bfloat16>();
            attention(a, nullptr);
            EXPECT_EQ(bf16_mismatches(dob, got), 0u) << "bf16 output differs from the rounded float32 output";
        }
    }
    set_attention_kt40(true);
}

// The fused decode kernel (q/k norm + RoPE + KV write + split-key attention + merge) against the CPU ops, for
// several GQA ratios, head sizes, context lengths (empty splits, several key tiles) and split counts; each case
// runs twice to show the merge counter is left at zero for the next call.
TEST(Cuda, FusedDecodeAttentionMatchesCpu) {
    NEED_GPU();
    struct Case { int Hq, Hkv, hd, n, splits; };
    for (const Case c : {Case{4, 2, 64, 1, 16}, Case{4, 2, 64, 5, 16}, Case{16, 8, 128, 37, 16},
                         Case{8, 2, 128, 300, 4}, Case{4, 4, 64, 77, 1}, Case{16, 2, 128, 130, 3},
                         Case{16, 8, 128, 300, 32},
                         Case{16, 8, 128, 39681, 16}}) { // the 0.6B/1.7B heads at a 20-minute piece's last token
        SCOPED_TRACE("Hq " + std::to_string(c.Hq) + " Hkv " + std::to_string(c.Hkv) + " hd " + std::to_string(c.hd) +
                     " n " + std::to_string(c.n) + " splits " + std::to_string(c.splits));
        ASSERT_TRUE(decode_attention_supported(c.Hq, c.Hkv, c.hd));
        const int hd = c.hd, W = (c.Hq + 2 * c.Hkv) * hd, row = c.Hkv * hd, p = c.n - 1;
        const uint32_t sd = uint32_t(c.n * 131 + c.hd + c.Hq);
        const std::vector<float> qkv = randv(size_t(W), sd), qn = randv(size_t(hd), sd + 1), kn = randv(size_t(hd), sd + 2);
        std::vector<float> kc = randv(size_t(c.n * row), sd + 3), vc = randv(size_t(c.n * row), sd + 4);
        std::vector<float> inv(size_t(hd / 2));
        for (int i = 0; i < hd / 2; ++i) inv[size_t(i)] = float(1.0 / std::pow(1e6, 2.0 * i / hd));
        Dev dqkv(qkv), dqn(qn), dkn(kn), dinv(inv), dkc(kc), dvc(vc), dpos(std::vector<int>{p});
        Dev dpart(size_t(c.Hq) * c.splits * decode_partial_floats(hd) * 4), dcnt(size_t(c.Hkv) * 4), dout(size_t(c.Hq * hd) * 4);
        std::vector<float> q(qkv.begin(), qkv.begin() + c.Hq * hd), k(qkv.begin() + c.Hq * hd, qkv.begin() + (c.Hq + c.Hkv) * hd);
        ops::rms_norm(q.data(), c.Hq, hd, qn.data(), 1e-6f);
        ops::rms_norm(k.data(), c.Hkv, hd, kn.data(), 1e-6f);
        ops::rope(q.data(), 1, c.Hq, hd, p, inv.data());
        ops::rope(k.data(), 1, c.Hkv, hd, p, inv.data());
        std::copy(k.begin(), k.end(), kc.begin() + size_t(p) * row);
        std::copy(qkv.begin() + (c.Hq + c.Hkv) * hd, qkv.end(), vc.begin() + size_t(p) * row);
        std::vector<float> o(size_t(c.Hq * hd));
        ops::causal_attention(q.data(), kc.data(), vc.data(), o.data(), 1, p, c.Hq, c.Hkv, hd);
        DecAttnArgs a;
        a.qkv = dqkv.p<float>(), a.pos = dpos.p<int>(), a.Hq = c.Hq, a.Hkv = c.Hkv, a.hd = hd;
        a.qn = dqn.p<float>(), a.kn = dkn.p<float>(), a.eps = 1e-6f, a.inv_freq = dinv.p<float>();
        a.kc = dkc.p<float>(), a.vc = dvc.p<float>(), a.o = dout.p<float>();
        a.splits = c.splits, a.part = dpart.p<float>(), a.counter = dcnt.p<unsigned>();
        decode_attention(a, nullptr);
        const std::vector<float> o1 = host(dout, o.size());
        EXPECT_LT(rel_l2(o1, o), 1e-5);
        EXPECT_LT(rel_l2(host(dkc, kc.size()), kc), 1e-6); // only row p changed, to the normalised, rotated k
        EXPECT_EQ(host(dvc, vc.size()), vc);
        QASR_CUDA(cudaMemset(dout.p<float>(), 0, o.size() * 4));
        a.pre_wait = true; // the cached keys/values loaded before the dependency wait: the same values, bit for bit
        decode_attention(a, nullptr);
        EXPECT_EQ(host(dout, o.size()), o1);
        EXPECT_EQ(host(dvc, vc.size()), vc);
        std::vector<unsigned> cnt(size_t(c.Hkv), 1u);
        QASR_CUDA(cudaMemcpy(cnt.data(), dcnt.p<unsigned>(), cnt.size() * 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(cnt, std::vector<unsigned>(size_t(c.Hkv), 0u));
        // The splits merged inside a cluster (2..16 splits; else the same path): the same merge arithmetic, but
        // the compiler contracts multiply-adds differently per kernel instance, so the results agree to an ulp or
        // two (H200: at most 6e-8 absolute), not always bit for bit.
        for (const bool pre : {false, true}) {
            SCOPED_TRACE(std::string("cluster merge, pre_wait ") + (pre ? "on" : "off"));
            QASR_CUDA(cudaMemset(dout.p<float>(), 0, o.size() * 4));
            a.pre_wait = pre, a.cluster = true;
            decode_attention(a, nullptr);
            const std::vector<float> oc = host(dout, o.size());
            float md = 0.0f;
            for (size_t i = 0; i < oc.size(); ++i) md = std::max(md, std::fabs(oc[i] - o1[i]));
            EXPECT_LT(md, 1e-6f) << "relative L2 " << rel_l2(oc, o1);
            EXPECT_LT(rel_l2(oc, o), 1e-5);
            EXPECT_EQ(host(dvc, vc.size()), vc);
            a.cluster = false;
        }
    }
    EXPECT_FALSE(decode_attention_supported(4, 2, 96));
    EXPECT_FALSE(decode_attention_supported(32, 2, 128));
}

TEST(Cuda, ArgmaxPicksLowestIdOnTiesAndItsLogProb) {
    NEED_GPU();
    std::vector<float> x = randv(151936, 14);
    x[777] = 9.0f;
    x[150000] = 9.0f;
    Dev dx(x), ints(std::vector<int>{0, 5, 0, 0}), scratch(size_t(3 * 256) * 4);
    int2* ring = nullptr;
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), sizeof(int2) * 4, cudaHostAllocMapped));
    argmax_token(dx.p<float>(), int(x.size()), scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring,
                 4, true, nullptr);
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<int> h(4);
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    EXPECT_EQ(h[0], 777);
    EXPECT_EQ(h[1], 6);
    EXPECT_EQ(h[2], 1);
    EXPECT_EQ(ring[0].x, 777);
    double s = 0;
    for (float v : x) s += std::exp(double(v) - 9.0);
    float lp;
    std::memcpy(&lp, &ring[0].y, 4);
    EXPECT_NEAR(lp, -std::log(s), 1e-4);
    // with an embedding table: the chosen row is written out too (the next decode step's input)
    const int K = 1024;
    const Bf16Mat E(1000, K, 15);
    Dev de(E.bits), dout(size_t(K) * 4);
    DMat emb;
    emb.rows = 1000, emb.cols = K, emb.data = de.p<void>();
    argmax_token(dx.p<float>(), 1000, scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                 true, nullptr, &emb, dout.p<float>());
    EXPECT_EQ(host(dout, size_t(K)), std::vector<float>(E.f.begin() + 777 * K, E.f.begin() + 778 * K));
    EXPECT_TRUE(argmax_can_embed(emb));
    DMat qe = emb; // a quantized table keeps the embedding kernel: refused with an error, nothing launched
    qe.bits = 8, qe.gs = 64;
    EXPECT_FALSE(argmax_can_embed(qe));
    EXPECT_ANY_THROW(argmax_token(dx.p<float>(), 1000, scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1,
                                  ints.p<int>() + 2, ring, 4, true, nullptr, &qe, dout.p<float>()));
    // every logit NaN (non-finite weights): no maximum; the ring gets −1 (the host's greedy loop throws on it), the
    // next input is row 0's and nothing is read past the table (memcheck runs this test)
    Dev dnan(std::vector<float>(1000, std::nanf("")));
    argmax_token(dnan.p<float>(), 1000, scratch.p<float>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                 true, nullptr, &emb, dout.p<float>());
    QASR_CUDA(cudaDeviceSynchronize());
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    EXPECT_EQ(ring[h[2] - 1].x, -1);
    EXPECT_EQ(h[0], 0);
    EXPECT_EQ(host(dout, size_t(K)), std::vector<float>(E.f.begin(), E.f.begin() + K));
    cudaFreeHost(ring);
}

// The decode step's LM head with the argmax's first stage fused (lm_head.cu) + the merge: logits, the token (the
// lowest index among equal maxima: a copy of the best row placed after it) and its log-probability against the CPU.
// lm_head_argmax of m over x (norm weights nw), then the argmax merge: the device logits, the chosen token, the
// position and count after it (from 5 and 0) and the ring's log-probability.
struct HeadRun {
    std::vector<float> logits;
    int tok = -1, pos = 0, count = 0;
    float lp = 0.0f;
};
HeadRun run_head_argmax(const DMat& m, const std::vector<float>& x, const std::vector<float>& nw, int V) {
    Dev dx(x), dn(nw), dlog(size_t(V) * 4), dpart(size_t(3 * 1024) * 4), ints(std::vector<int>{0, 5, 0, 0});
    HeadRun r;
    const int parts = lm_head_argmax(m, dx.p<float>(), dn.p<float>(), 1e-6f, dlog.p<float>(), dpart.p<float>(), 1024, nullptr);
    EXPECT_GT(parts, 0) << "the fused LM head applies to heads of width 1024 and 2048 on sm_90";
    if (parts <= 0) return r;
    int2* ring = nullptr;
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), sizeof(int2) * 4, cudaHostAllocMapped));
    argmax_merge(dlog.p<float>(), dpart.p<float>(), parts, ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                 true, nullptr);
    QASR_CUDA(cudaDeviceSynchronize());
    r.logits = host(dlog, size_t(V));
    std::vector<int> h(4);
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    r.tok = h[0], r.pos = h[1], r.count = h[2];
    std::memcpy(&r.lp, &ring[0].y, 4);
    cudaFreeHost(ring);
    return r;
}
// The token: the first maximum of the device logits; its log-probability; the counters advanced once.
void expect_head_choice(const HeadRun& r) {
    const std::vector<float>& got = r.logits;
    ASSERT_FALSE(got.empty());
    EXPECT_EQ(r.tok, int(std::max_element(got.begin(), got.end()) - got.begin()));
    EXPECT_EQ(r.pos, 6);
    EXPECT_EQ(r.count, 1);
    double se = 0;
    for (float v : got) se += std::exp(double(v) - double(got[size_t(r.tok)]));
    EXPECT_NEAR(r.lp, -std::log(se), 1e-4);
}

TEST(Cuda, LmHeadArgmaxMatchesCpu) {
    NEED_GPU();
    for (const auto& [V, K] : {std::pair<int, int>{20011, 1024}, {9000, 2048}}) {
        SCOPED_TRACE(std::to_string(V) + "x" + std::to_string(K));
        Bf16Mat W(V, K, uint32_t(V + K));
        const std::vector<float> x = randv(size_t(K), 31), nw = randv(size_t(K), 32);
        std::vector<float> xn = x;
        ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
        auto logits_of = [&] {
            std::vector<float> ref(static_cast<size_t>(V));
            ops::linear(xn.data(), 1, K, W.f.data(), V, nullptr, ref.data());
            return ref;
        };
        std::vector<float> ref = logits_of();
        const int best = int(std::max_element(ref.begin(), ref.end()) - ref.begin());
        const int copy = best + 1 + (V - best - 1) / 2; // a later row equal to the best one: the tie goes to `best`
        ASSERT_LT(copy, V);
        std::copy(W.f.begin() + int64_t(best) * K, W.f.begin() + int64_t(best + 1) * K, W.f.begin() + int64_t(copy) * K);
        std::copy(W.bits.begin() + int64_t(best) * K, W.bits.begin() + int64_t(best + 1) * K, W.bits.begin() + int64_t(copy) * K);
        ref = logits_of();
        Dev dw(W.bits);
        DMat m;
        m.rows = V, m.cols = K, m.data = dw.p<void>();
        const HeadRun r = run_head_argmax(m, x, nw, V);
        EXPECT_LT(rel_l2(r.logits, ref), 1e-5);
        expect_head_choice(r);
        ASSERT_FALSE(r.logits.empty());
        EXPECT_EQ(r.logits[size_t(best)], r.logits[size_t(copy)]);
        EXPECT_EQ(r.tok, best);
    }
}

// The quantized LM head (MLX 4/6/8-bit) with the argmax partials, against the dequantized weights on the CPU.
TEST(Cuda, LmHeadArgmaxQuantizedMatchesCpu) {
    NEED_GPU();
    for (const int bits : {8, 6, 4})
        for (const auto& [V, K] : {std::pair<int, int>{20011, 1024}, {9000, 2048}}) {
            SCOPED_TRACE(std::to_string(bits) + "-bit " + std::to_string(V) + "x" + std::to_string(K));
            const int gs = 64;
            const std::vector<float> w = randv(size_t(V) * K, uint32_t(V + bits), 0.2f), x = randv(size_t(K), 61),
                                     nw = randv(size_t(K), 62);
            const QuantDevMat Q(w, V, K, bits, gs);
            std::vector<float> xn = x;
            ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
            std::vector<float> ref(static_cast<size_t>(V));
            for (int r = 0; r < V; ++r) {
                double acc = 0;
                for (int k = 0; k < K; ++k) acc += double(Q.f[size_t(r) * K + k]) * xn[size_t(k)];
                ref[size_t(r)] = float(acc);
            }
            const HeadRun r = run_head_argmax(Q.m, x, nw, V);
            EXPECT_LT(rel_l2(r.logits, ref), 1e-5);
            expect_head_choice(r);
        }
}

// The screened greedy head: the 8-bit proxy, the per-row bounds and the bf16 rescoring choose the full head's token,
// as three kernels (head_screen.cu) or as one (fused: head_fused.cu, the proxy on the tensor cores and the screen in
// its last block). scale: the bound's factor (1.01 in use; 0 = no bound, to show a case needs it).
struct ScreenRun {
    int tok = -1;
    float lp = 0.0f;
    unsigned listed = 0; // rows rescored over all blocks
    std::vector<float> plog; // the proxy logits
    std::vector<float> emb;  // the chosen row of the embedding table (fused: written by the kernel)
};
ScreenRun run_screened(const DMat& m, const HeadScreen& hs, const std::vector<float>& x, const std::vector<float>& nw, int V,
                       float scale, bool fused) {
    const int K = int(m.cols);
    Dev dx(x), dn(nw), dplog(size_t(V) * 4), dpart(size_t(8 * 1024) * 4), dxp(size_t(3 * 1024) * 4),
        ints(std::vector<int>{0, 5, 0, 0}), stats(std::vector<unsigned>{0}), counter(std::vector<unsigned>{0}),
        demb(size_t(K) * 4);
    ScreenRun r;
    int2* ring = nullptr;
    QASR_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&ring), sizeof(int2) * 4, cudaHostAllocMapped));
    if (fused) {
        const bool ok = screened_head_choose(m, hs, dx.p<float>(), dn.p<float>(), 1e-6f, dplog.p<float>(), dpart.p<float>(),
                                             1024, counter.p<unsigned>(), ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2,
                                             ring, 4, true, &m, demb.p<float>(), stats.p<unsigned>(), nullptr, scale);
        EXPECT_TRUE(ok) << "the fused screen applies to bf16 heads of width 1024 and 2048 on sm_90";
        if (!ok) return cudaFreeHost(ring), r;
    } else {
        int parts = 0;
        const int nx = screened_head_argmax(m, hs, dx.p<float>(), dn.p<float>(), 1e-6f, dplog.p<float>(), dpart.p<float>(),
                                            1024, &parts, dxp.p<float>(), 1024, stats.p<unsigned>(), nullptr, scale);
        EXPECT_GT(nx, 0) << "the screen applies to bf16 heads of width 1024 and 2048 on sm_90";
        if (nx <= 0) return cudaFreeHost(ring), r;
        argmax_merge(dplog.p<float>(), dpart.p<float>(), parts, ints.p<int>(), ints.p<int>() + 1, ints.p<int>() + 2, ring, 4,
                     true, nullptr, nullptr, nullptr, dxp.p<float>(), nx);
    }
    QASR_CUDA(cudaDeviceSynchronize());
    std::vector<int> h(4);
    QASR_CUDA(cudaMemcpy(h.data(), ints.p<void>(), 16, cudaMemcpyDeviceToHost));
    QASR_CUDA(cudaMemcpy(&r.listed, stats.p<void>(), 4, cudaMemcpyDeviceToHost));
    r.tok = h[0];
    r.plog = host(dplog, size_t(V));
    if (fused) {
        r.emb = host(demb, size_t(K));
        unsigned c = 1;
        QASR_CUDA(cudaMemcpy(&c, counter.p<void>(), 4, cudaMemcpyDeviceToHost));
        EXPECT_EQ(c, 0u) << "the arrival count is back at zero";
    }
    std::memcpy(&r.lp, &ring[0].y, 4);
    EXPECT_EQ(ring[0].x, r.tok);
    EXPECT_EQ(h[1], 6);
    EXPECT_EQ(h[2], 1);
    cudaFreeHost(ring);
    return r;
}

// A bf16 head [V, K] of the given bits on the device, with its screen (build_head_screen).
struct ScreenedHead {
    Dev w;
    DMat m;
    std::vector<Buffer> store;
    size_t bytes = 0;
    HeadScreen hs;
    ScreenedHead(const std::vector<uint16_t>& bits, int V, int K) : w(bits) {
        m.rows = V, m.cols = K, m.data = w.p<void>();
        hs = build_head_screen(m, store, bytes);
    }
};

TEST(Cuda, ScreenedHeadChoosesTheFullHeadsToken) {
    NEED_GPU();
    if (device_major() < 9) GTEST_SKIP() << "the screened head needs sm_90 (bulk copies)";
    int sms = 0;
    QASR_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    for (const auto& [V0, K] : {std::pair<int, int>{20011, 1024}, {9000, 2048}}) {
        SCOPED_TRACE(std::to_string(V0) + "x" + std::to_string(K));
        auto check = [&](const std::vector<uint16_t>& bits, int V, const std::vector<float>& x, const std::vector<float>& nw,
                         const char* what) {
            SCOPED_TRACE(what);
            const ScreenedHead h(bits, V, K);
            const DMat& m = h.m;
            const HeadScreen& hs = h.hs;
            EXPECT_TRUE(bool(hs));
            EXPECT_EQ(h.bytes, size_t(V) * (K + (K / 64) * 4 + 16) + size_t(V) * 4);
            const HeadRun full = run_head_argmax(m, x, nw, V);
            const ScreenRun s3 = run_screened(m, hs, x, nw, V, 1.01f, false);
            EXPECT_EQ(s3.tok, full.tok);
            EXPECT_NEAR(s3.lp, full.lp, 1e-3);
            const ScreenRun s = run_screened(m, hs, x, nw, V, 1.01f, true); // the fused kernel
            EXPECT_EQ(s.tok, full.tok);
            EXPECT_NEAR(s.lp, full.lp, 1e-3);
            if (s.tok >= 0 && s.tok < V) { // its next-step input: the chosen row of the table (here the head itself)
                int wrong = 0;
                for (int k = 0; k < K; ++k) wrong += s.emb[size_t(k)] != bf16_to_f32(bits[size_t(s.tok) * K + k]);
                EXPECT_EQ(wrong, 0) << "columns of the embedding row written wrong";
            }
            // the bound holds row by row: |proxy − head logit| ≤ ‖x̂‖·R_r
            std::vector<float> R(static_cast<size_t>(V)), xn = x;
            QASR_CUDA(cudaMemcpy(R.data(), hs.bound, size_t(V) * 4, cudaMemcpyDeviceToHost));
            ops::rms_norm(xn.data(), 1, K, nw.data(), 1e-6f);
            double nx = 0, worst = 0;
            for (float v : xn) nx += double(v) * v;
            nx = std::sqrt(nx);
            double worst3 = 0;
            for (int r = 0; r < V && !s.plog.empty() && !s3.plog.empty() && !full.logits.empty(); ++r) {
                worst = std::max(worst, std::fabs(double(s.plog[size_t(r)]) - full.logits[size_t(r)]) / (nx * R[size_t(r)]));
                worst3 = std::max(worst3, std::fabs(double(s3.plog[size_t(r)]) - full.logits[size_t(r)]) / (nx * R[size_t(r)]));
            }
            EXPECT_LE(worst, 1.0);
            EXPECT_LE(worst3, 1.0);
            std::printf("  %s: largest |proxy − logit| / bound %.3f (int16 x̂: %.3f), rows rescored %u (three kernels: %u)\n",
                        what, worst, worst3, s.listed, s3.listed);
            return std::make_pair(full, s);
        };
        // random weights: a few rows listed, the full head's token; a copy of the best row later: the lower index
        {
            Bf16Mat W(V0, K, uint32_t(V0 + K + 7));
            const std::vector<float> x = randv(size_t(K), 71), nw = randv(size_t(K), 72);
            auto [full, s] = check(W.bits, V0, x, nw, "random");
            EXPECT_LE(s.listed, 64u);
            const int best = full.tok, copy = best + 1 + (V0 - best - 1) / 2;
            ASSERT_LT(copy, V0);
            std::copy(W.bits.begin() + int64_t(best) * K, W.bits.begin() + int64_t(best + 1) * K, W.bits.begin() + int64_t(copy) * K);
            auto [full2, s2] = check(W.bits, V0, x, nw, "copy of the best row");
            EXPECT_EQ(s2.tok, best);
            EXPECT_GE(s2.listed, 2u);
        }
        // x̂ ≈ 1: row A (index 100) has 64 weights 0.0166 (an exact proxy: logit 1.0625); row B (index 5000) one
        // weight 1, one 0 and 62 of 2⁻⁹, which the proxy (scale ≈ 1/254) rounds to 0 (proxy ≈ 0.9999, logit 1.121).
        // The proxy's argmax is A, the head's B: without the bound only A is listed and the choice is wrong.
        {
            std::vector<uint16_t> bits(size_t(V0) * K, 0);
            for (int k = 0; k < 64; ++k) bits[size_t(100) * K + k] = bf16_bits(0.0166015625f);
            bits[size_t(5000) * K] = bf16_bits(1.0f);
            for (int k = 2; k < 64; ++k) bits[size_t(5000) * K + k] = bf16_bits(0.001953125f);
            const std::vector<float> ones(size_t(K), 1.0f);
            auto [full, s] = check(bits, V0, ones, ones, "proxy argmax differs");
            EXPECT_EQ(full.tok, 5000);
            const ScreenedHead h(bits, V0, K);
            for (const bool fused : {false, true})
                EXPECT_EQ(run_screened(h.m, h.hs, ones, ones, V0, 0.0f, fused).tok, 100) << "without the bound the proxy's choice";
        }
    }
    // more candidates than a block lists (every row equal but one, slices of 600 rows): whole slices rescored
    {
        const int K = 1024, V = 600 * sms;
        const Bf16Mat R(1, K, 91);
        std::vector<uint16_t> bits(size_t(V) * K);
        for (int r = 0; r < V; ++r) std::copy(R.bits.begin(), R.bits.end(), bits.begin() + int64_t(r) * K);
        const std::vector<float> x = randv(size_t(K), 92), nw(size_t(K), 1.0f);
        int k = -1; // the weight > 0 with the largest x: one bf16 step up makes row j the largest
        for (int i = 0; i < K; ++i)
            if (R.f[size_t(i)] > 0.0f && (k < 0 || x[size_t(i)] > x[size_t(k)])) k = i;
        ASSERT_GT(x[size_t(k)], 0.5f);
        const int j = V / 2 + 17;
        bits[size_t(j) * K + k] = uint16_t(bits[size_t(j) * K + k] + 1);
        const ScreenedHead h(bits, V, K);
        const DMat& m = h.m;
        const HeadScreen& hs = h.hs;
        const HeadRun full = run_head_argmax(m, x, nw, V);
        EXPECT_EQ(full.tok, j);
        for (const bool fused : {false, true}) {
            const ScreenRun s = run_screened(m, hs, x, nw, V, 1.01f, fused);
            EXPECT_EQ(s.tok, j);
            EXPECT_NEAR(s.lp, full.lp, 1e-3);
            EXPECT_GT(s.listed, unsigned(V) / 2) << "every block listed more rows than it holds";
        }
    }
    // where it does not apply: a quantized head, another width → 0, nothing launched
    {
        DMat q;
        q.bits = 8, q.rows = 1000, q.cols = 1024, q.gs = 64;
        std::vector<Buffer> store;
        size_t bytes = 0;
        EXPECT_FALSE(bool(build_head_screen(q, store, bytes)));
        DMat w;
        w.rows = 1000, w.cols = 768;
        EXPECT_FALSE(bool(build_head_screen(w, store, bytes)));
        EXPECT_EQ(bytes, 0u);
    }
}
