// The CUDA session's audio encoder: log-mel on the device, the conv stem as im2col + cuBLAS products, the encoder
// layers with the windowed (tiled) attention, and the projector into the decoder's width.
#include "backend/cuda/cuda_session.hpp"

#include "audio/mel.hpp"
#include "model/encoder.hpp"

namespace qasr::cuda::detail {

namespace {
int64_t conv_len(int64_t n) { return (n + 1) / 2; }
} // namespace

Tensor CudaSession::encode(const Tensor& mel) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    if (mel.dim(0) != m_.hp.audio.n_mels)
        fail("encoder", "mel has " + std::to_string(mel.dim(0)) + " bins, model wants " + std::to_string(m_.hp.audio.n_mels));
    if (mel.dim(1) <= 0) fail("encoder", "no mel frames");
    emel_.ensure(mel.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(emel_.get(), mel.ptr(), mel.size() * 4, cudaMemcpyHostToDevice, s_));
    return encode_device(emel_.as<float>(), int(mel.dim(1)));
}

int CudaSession::upload_audio(const std::vector<float>& audio, size_t min_samples) {
    const size_t N = std::max(audio.size(), min_samples);
    if (N <= 200) fail("mel", "audio of " + std::to_string(N) + " samples is too short for the STFT");
    const int T = int(MelFrontend::n_frames(N)), n_mels = m_.hp.audio.n_mels;
    maudio_.ensure(std::max<size_t>(audio.size(), 1) * 4);
    QASR_CUDA(cudaMemcpyAsync(maudio_.get(), audio.data(), audio.size() * 4, cudaMemcpyHostToDevice, s_));
    mwork_.ensure(log_mel_work_bytes(T, n_mels));
    emel_.ensure(size_t(T) * n_mels * 4);
    return T;
}

void CudaSession::queue_mel(int64_t n_have, int64_t N, int T) {
    log_mel(*gemm_, maudio_.as<float>(), n_have, N, T, m_.hp.audio.n_mels, w_.mel_window, w_.mel_dft, w_.mel_filters,
            mwork_.as<double>(), emel_.as<float>(), qs_);
}

void CudaSession::queue_front(const std::vector<float>& audio, size_t min_samples, double* mel_ms, int* T_out, bool wait) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    Stopwatch sw;
    const int T = upload_audio(audio, min_samples);
    const double t_copy = sw.ms();
    queue_mel(int64_t(audio.size()), int64_t(std::max(audio.size(), min_samples)), T);
    if (hosttime_) {
        const double t_queued = sw.ms();
        QASR_CUDA(cudaStreamSynchronize(s_));
        std::fprintf(stderr, "qasr cuda hosttime: front end %zu samples: audio copy %.3f ms, queued %.3f ms, done %.3f ms\n",
                     audio.size(), t_copy, t_queued, sw.ms());
    }
    if (mel_ms) {
        if (wait) QASR_CUDA(cudaStreamSynchronize(s_));
        *mel_ms = sw.ms();
    }
    *T_out = T;
}

Tensor CudaSession::encode_audio(const std::vector<float>& audio, size_t min_samples, double* mel_ms) {
    int T = 0;
    queue_front(audio, min_samples, mel_ms, &T);
    return encode_device(emel_.as<float>(), T);
}

int64_t CudaSession::encode_audio_resident(const std::vector<float>& audio, size_t min_samples, double* mel_ms) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    Stopwatch sw;
    // mel_ms: the time to copy the audio; the front end is queued with the encoder, as one pass (a graph once
    // recorded: its ~6 launches, two of them products, took the host 0.08–0.19 ms while the device waited, H100);
    // their device time counts in what follows, as the encoder's does in the prefill's
    const int T = upload_audio(audio, min_samples);
    if (mel_ms) *mel_ms = sw.ms();
    const int64_t n_have = int64_t(audio.size()), N = int64_t(std::max(audio.size(), min_samples));
    int window = 0;
    const int A = stem_rows(T, &window);
    auto key_now = [this, T, n_have, N] {
        return PassKey{0, T, n_have, N, {emel_.get(), ecols_.get(), ea_.get(), eb_.get(), eco_.get(), ex_.get(), ebf_.get(),
                                         eqkv_.get(), eatt_.get(), eu_.get(), eout_.get(), deq_.get(), maudio_.get(), mwork_.get()}};
    };
    run_pass(key_now(), key_now, [this, T, n_have, N, A, window] {
        queue_mel(n_have, N, T);
        int w = 0;
        stem_device(emel_.as<float>(), T, &w);
        queue_layers(A, window);
    });
    resident_ = A;
    return A;
}

Tensor CudaSession::encode_device(const float* d_mel, int T) {
    int window = 0;
    const int A = stem_device(d_mel, T, &window);
    return encode_layers(A, window);
}

Tensor CudaSession::encode_stem(const Tensor& mel) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const AudioHParams& hp = m_.hp.audio;
    if (mel.dim(0) != hp.n_mels || mel.dim(1) <= 0 || mel.dim(1) > hp.chunk_frames())
        fail("encoder", "a stem chunk is [n_mels, 1..chunk_frames] of mel");
    emel_.ensure(mel.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(emel_.get(), mel.ptr(), mel.size() * 4, cudaMemcpyHostToDevice, s_));
    int window = 0;
    const int A = stem_device(emel_.as<float>(), int(mel.dim(1)), &window);
    Tensor out({int64_t(A), int64_t(hp.d_model)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), ex_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

int CudaSession::stem_rows(int T, int* window) const {
    const AudioHParams& hp = m_.hp.audio;
    const int cf = hp.chunk_frames(), C = (T + cf - 1) / cf;
    int m = 0;
    for (int c = 0; c < C; ++c) m = std::max(m, int(audio_token_count(std::min(cf, T - c * cf), hp)));
    *window = m * (hp.n_window_infer / cf);
    return int(audio_token_count(T, hp));
}

int CudaSession::stem_device(const float* d_mel, int T, int* window_out) {
    const AudioHParams& hp = m_.hp.audio;
    const int n_mels = hp.n_mels, cf = hp.chunk_frames(), C = (T + cf - 1) / cf;
    const int Ch = hp.conv_channels, d = hp.d_model;
    const int H1 = int(conv_len(n_mels)), W1 = int(conv_len(cf)), H2 = int(conv_len(H1)), W2 = int(conv_len(W1));
    const int H3 = int(conv_len(H2)), W3 = int(conv_len(W2));
    int window = 0;
    const int A = stem_rows(T, &window);

    // The chunks pass the stem kStemGroup at a time: a chunk's columns and activations take ~15 MB (a 605 s request's
    // stem at once held ~9 GB on the device); a group's products keep tens of thousands of rows.
    const int G = std::min(C, kStemGroup);
    const size_t p1 = size_t(G) * H1 * W1, p2 = size_t(G) * H2 * W2, p3 = size_t(G) * H3 * W3;
    ecols_.ensure(std::max({p1 * 16, p2 * Ch * 9, p3 * Ch * 9, size_t(G) * W3 * Ch * H3}) * 2);
    ea_.ensure(p1 * Ch * 4);
    eb_.ensure(p2 * Ch * 4);
    eco_.ensure(size_t(C) * W3 * d * 4);
    bf16* cols = ecols_.as<bf16>();
    for (int c0 = 0; c0 < C; c0 += G) {
        const int n = std::min(G, C - c0);
        const int q1 = n * H1 * W1, q2 = n * H2 * W2, q3 = n * H3 * W3;
        im2col_mel(d_mel + size_t(c0) * cf, n_mels, T, T - c0 * cf, cf, n, 16, cols, qs_);
        gemm_->run(cols, q1, 16, w_.conv1_w, Ch, ea_.as<float>(), 0.0f, qs_);
        bias_act(ea_.as<float>(), q1, Ch, w_.conv1_b, true, nullptr, qs_);
        im2col(ea_.as<float>(), n, H1, W1, Ch, cols, qs_);
        gemm_->run(cols, q2, Ch * 9, w_.conv2_w, Ch, eb_.as<float>(), 0.0f, qs_);
        bias_act(eb_.as<float>(), q2, Ch, w_.conv2_b, true, nullptr, qs_);
        im2col(eb_.as<float>(), n, H2, W2, Ch, cols, qs_);
        gemm_->run(cols, q3, Ch * 9, w_.conv3_w, Ch, ea_.as<float>(), 0.0f, qs_);
        bias_act(ea_.as<float>(), q3, Ch, w_.conv3_b, true, nullptr, qs_);
        flatten_stem(ea_.as<float>(), n, H3, W3, Ch, cols, qs_);
        gemm_w(cols, n * W3, w_.conv_out, eco_.as<float>() + size_t(c0) * W3 * d, 0.0f);
    }
    ex_.ensure(size_t(A) * d * 4);
    float* x = ex_.as<float>();
    add_pe(eco_.as<float>(), A, d, W3, w_.pe, x, qs_);
    *window_out = window;
    return A;
}

Tensor CudaSession::encode_rows(const Tensor& rows, int64_t window_rows) {
    settle();
    join_capture(); // the recording thread reads the buffers this may move
    QASR_CUDA(cudaSetDevice(w_.ordinal));
    const AudioHParams& hp = m_.hp.audio;
    if (rows.rows() <= 0 || rows.cols() != hp.d_model) fail("encoder", "stem rows of the wrong shape");
    if (window_rows <= 0) fail("encoder", "attention window of no rows");
    ex_.ensure(rows.size() * 4);
    QASR_CUDA(cudaMemcpyAsync(ex_.get(), rows.ptr(), rows.size() * 4, cudaMemcpyHostToDevice, s_));
    return encode_layers(int(rows.rows()), int(window_rows));
}

Tensor CudaSession::encode_layers(int A, int window) {
    queue_layers(A, window);
    const int O = int(w_.proj2.rows);
    Tensor out({int64_t(A), int64_t(O)});
    QASR_CUDA(cudaMemcpyAsync(out.ptr(), eout_.get(), out.size() * 4, cudaMemcpyDeviceToHost, s_));
    QASR_CUDA(cudaStreamSynchronize(s_));
    return out;
}

void CudaSession::queue_layers(int A, int window) {
    resident_ = -1; // eout_ is rewritten
    const AudioHParams& hp = m_.hp.audio;
    const int d = hp.d_model, F = hp.ffn_dim, heads = hp.n_heads;
    float* x = ex_.as<float>();
    ebf_.ensure(size_t(A) * std::max(d, F) * 2);
    eqkv_.ensure(size_t(A) * 3 * d * 4);
    eatt_.ensure(size_t(A) * d * 4);
    eu_.ensure(size_t(A) * F * 4);
    bf16* abf = ebf_.as<bf16>();
    Stopwatch sw;
    if (profile_) ++prof_calls_["encoder"], npev_ = 0, mark("start");
    // The residual's biases (o, fc2) are added by the layer norm that reads the residual next (ln2, the next layer's
    // ln1, ln_post): the same sums, one kernel fewer each.
    const float* pending = nullptr;
    for (const DevEncLayer& l : w_.enc) {
        add_layer_norm(x, A, d, pending, l.ln1_w, l.ln1_b, 1e-5f, abf, qs_);
        mark("norm");
        gemm_w(abf, A, l.qkv, eqkv_.as<float>(), 0.0f);
        mark("qkv");
        AttnArgs at;
        at.q = eqkv_.as<float>();
        at.k = eqkv_.as<float>() + d;
        at.v = eqkv_.as<float>() + 2 * d;
        at.q_stride = at.kv_stride = 3 * d;
        at.o = eatt_.as<float>();
        at.o_stride = d;
        at.n = A;
        at.heads = at.kv_heads = heads;
        at.hd = d / heads;
        at.causal = false;
        at.window = window;
        at.ob = abf; // the o product's operand directly
        // the q/k/v biases added by the tiled attention as it loads its rows (else their own kernel first)
        at.bq = l.qkv_b, at.bk = l.qkv_b + d, at.bv = l.qkv_b + 2 * d;
        if (!attention_tiled(at)) {
            bias_act(eqkv_.as<float>(), A, 3 * d, l.qkv_b, false, nullptr, qs_);
            mark("bias");
            at.bq = at.bk = at.bv = nullptr;
        }
        attention(at, qs_);
        mark("attention");
        gemm_w(abf, A, l.o, x, 1.0f);
        mark("o");
        add_layer_norm(x, A, d, l.o_b, l.ln2_w, l.ln2_b, 1e-5f, abf, qs_);
        mark("norm");
        gemm_w(abf, A, l.fc1, eu_.as<float>(), 0.0f);
        mark("fc1");
        bias_act(eu_.as<float>(), A, F, l.fc1_b, true, abf, qs_, false); // fc2 reads the bf16 copy only
        mark("bias_gelu");
        gemm_w(abf, A, l.fc2, x, 1.0f);
        mark("fc2");
        pending = l.fc2_b;
    }
    rows_flush("encoder");
    npev_ = 0;
    host_report("encoder", A, sw);
    add_layer_norm(x, A, d, pending, w_.ln_post_w, w_.ln_post_b, 1e-5f, abf, qs_);
    gemm_w(abf, A, w_.proj1, eatt_.as<float>(), 0.0f);
    bias_act(eatt_.as<float>(), A, d, w_.proj1_b, true, abf, qs_, false); // proj2 reads the bf16 copy only
    const int O = int(w_.proj2.rows);
    eout_.ensure(size_t(A) * O * 4);
    gemm_w(abf, A, w_.proj2, eout_.as<float>(), 0.0f);
    bias_act(eout_.as<float>(), A, O, w_.proj2_b, false, nullptr, qs_);
}

} // namespace qasr::cuda::detail
