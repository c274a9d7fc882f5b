// The CUDA kernels of the GPU path, as host-side launchers on a stream. Activations are float32 (the residual
// streams, attention, norms); matrix products read bf16 or MLX affine-quantized weights and accumulate in
// float32 (matrix-vector products: fused kernels here; matrix-matrix products: cuBLAS on bf16 operands).
#pragma once
#include "backend/cuda/check.hpp"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace qasr::cuda {

using bf16 = __nv_bfloat16;
namespace detail {
class GemmPlans; // gemm.hpp
}

// A weight matrix [rows, cols] on the device: bf16, or MLX affine codes (bits 4/6/8, little-endian bit stream per
// row) with bf16 scales and biases per group of gs columns.
struct DMat {
    int bits = 16; // 16 = bf16
    int64_t rows = 0, cols = 0;
    int gs = 0;
    const void* data = nullptr;
    const bf16* scales = nullptr;
    const bf16* biases = nullptr;
    size_t bytes() const;
};

enum class Epi { Store, Add, SwiGLU }; // y = Wx | y += Wx | y[i] = silu((Wx)[i]) * (Wx)[i + rows/2]

// y = W·x for one row x [K] (K = W.cols); with norm_w, x is RMS-normalised first (weight norm_w, eps). True when
// the prefetching kernel ran (matvec_prefetch: it triggers the next kernel's launch early).
bool matvec(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s,
            bool early = false);
// The decode step's bf16 products with the weights prefetched into shared memory before the dependency wait
// (matvec_prefetch.cu); matvec() uses it where it applies (QASR_CUDA_MV_PREFETCH=0 turns it off). prepare: once
// per device, outside graph capture.
void matvec_prefetch_prepare(int ordinal);
bool matvec_prefetch(const DMat& W, const float* x, const float* norm_w, float eps, float* y, Epi epi, cudaStream_t s,
                     bool early = false);
// out[i, :] = table[ids[i], :] as float32.
void embed(const DMat& table, const int* ids, int n, float* out, cudaStream_t s);
// Whole matrix as bf16 [rows, cols] (for cuBLAS).
void dequant_bf16(const DMat& W, bf16* out, cudaStream_t s);

void rms_norm(const float* x, int rows, int d, const float* w, float eps, float* out_f32, bf16* out_bf16,
              cudaStream_t s);
void layer_norm(const float* x, int rows, int d, const float* w, const float* b, float eps, bf16* out, cudaStream_t s);
// x[r, :] += add (a bias, in place), then layer_norm of the result; add may be null.
void add_layer_norm(float* x, int rows, int d, const float* add, const float* w, const float* b, float eps, bf16* out,
                    cudaStream_t s);
void to_bf16(const float* x, size_t n, bf16* out, cudaStream_t s);
// y[r, :] += bias; then GELU (exact erf) if gelu; a bf16 copy into out_bf16 when non-null.
void bias_act(float* y, int rows, int n, const float* bias, bool gelu, bf16* out_bf16, cudaStream_t s,
              bool write_y = true); // write_y = false: y may be left as it was (only out_bf16 is read)
// out[r, i] = silu(gu[r, i]) * gu[r, I + i] as bf16.
void swiglu_bf16(const float* gu, int rows, int I, bf16* out, cudaStream_t s);

// The rows of a batched decode step (DeviceBatch), one per session, in device memory: row r is token tok[r] at
// position pos[r] of a session whose KV cache is kv[r] ([layers][k|v][cap[r]][Hkv·hd], as CudaSession's).
struct BatchRows {
    static constexpr int kMax = 128;
    int tok[kMax];
    int pos[kMax];
    float* kv[kMax];
    long long cap[kMax];
};
// Rows of different sessions: the layer's keys and values of row r live in rows->kv[r] (null: one cache, kc/vc).
struct RowsKv {
    const BatchRows* rows = nullptr;
    int layer = 0;
};

// qkv rows [n, (Hq + 2·Hkv)·hd] at positions *pos + r: q/k RMSNorm per head, rotate-half RoPE; q → q_out
// [n, Hq·hd]; k, v → the caches [cap, Hkv·hd] at those positions. With rk.rows: row r at rk.rows->pos[r], into its
// own session's cache (layer rk.layer); pos, kc and vc unused.
void qk_norm_rope_kv(const float* qkv, int n, const int* pos, int Hq, int Hkv, int hd, const float* q_norm,
                     const float* k_norm, float eps, const float* inv_freq, float* q_out, float* kc, float* vc,
                     cudaStream_t s, RowsKv rk = {});

struct AttnArgs {
    const float* q = nullptr;
    int q_stride = 0;
    const float* k = nullptr;
    const float* v = nullptr;
    int kv_stride = 0;
    float* o = nullptr;
    int o_stride = 0;
    int n = 0;              // query rows
    int heads = 0, kv_heads = 0, hd = 0;
    bool causal = true;     // causal over past + row + 1 keys; else windows of `window` rows (bidirectional)
    int window = 0;
    const int* past = nullptr; // causal: device int, position of row 0 (null: 0)
    int splits = 1;         // > 1: split the keys, partial results in `part`, then combined
    float* part = nullptr;  // [n · heads · splits · (hd + 2)]
    bf16* ob = nullptr;     // set: the output as bf16 here (o: float32 scratch where the tiled kernel does not apply)
    int keys_hint = 0;      // the most keys of a row, if the host knows it (past + n); chooses the key splits
    // biases of q, k and v ([heads·hd], [kv_heads·hd] each), added as they are loaded; only where attention_tiled(a)
    const float* bq = nullptr;
    const float* bk = nullptr;
    const float* bv = nullptr;
};
// rk.rows (rows of a batched decode step; causal, no biases; k, v and past unused): row r attends over positions
// 0..rk.rows->pos[r] of its own session's cache at layer rk.layer (the row-per-warp kernel). Not a member of AttnArgs:
// the struct's layout decides the code of the prefill's attention kernels.
void attention(const AttnArgs& a, cudaStream_t s, RowsKv rk = {});
// Whether attention(a) runs the tiled kernel (many rows, head_dim 64/128), which can add q/k/v biases on load.
bool attention_tiled(const AttnArgs& a);
// The tiled case on the tensor cores (TF32 products, float32 accumulation; sm_80+, attention_mma.cu): runs it and
// returns true, or false where it does not apply (QASR_CUDA_ATTN_MMA=0 turns it off). attention() calls it first.
bool attention_mma(const AttnArgs& a, cudaStream_t s);
void set_attention_mma(bool on); // process-wide, as set_pdl (tests compare both paths)
void set_attention_kt40(bool on); // 40-key tiles where they save the longest row tile a round (default on)

// Decode attention of the one new token at *pos fused with qk_norm_rope_kv: qkv [(Hq + 2·Hkv)·hd] → q/k RMSNorm
// + RoPE, k and v written into the caches kc/vc [cap, Hkv·hd] at *pos, o [Hq·hd] = causal attention over 0..*pos.
// splits > 1: part ≥ Hq·splits·(hd + 2) floats and counter ≥ Hkv unsigned, zero before the first call (the
// kernel leaves them zero again). Supported: hd 64/128/256, Hq/Hkv ≤ 8 (decode_attention_supported).
struct DecAttnArgs {
    const float* qkv = nullptr;
    const int* pos = nullptr;
    int Hq = 0, Hkv = 0, hd = 0;
    const float* qn = nullptr;
    const float* kn = nullptr;
    float eps = 1e-6f;
    const float* inv_freq = nullptr;
    float* kc = nullptr;
    float* vc = nullptr;
    float* o = nullptr;
    int splits = 1;
    float* part = nullptr;
    unsigned* counter = nullptr;
    bool pre_wait = false; // load the cached keys/values before waiting (the q/k/v product triggered early)
    // merge the splits (2..16) inside a thread-block cluster (sm_90) instead of through part/counter and a last
    // block; falls back to the latter where clusters of that size cannot run
    bool cluster = false;
    // trigger the successor's launch at entry (its weight copies start while this kernel waits), not after the wait
    bool early = false;
};
// Floats per split partial of decode_attention (acc[hd], max, sum, padding to a multiple of 4); part ≥ Hq·splits·this.
__host__ __device__ constexpr int decode_partial_floats(int hd) { return hd + 4; }
bool decode_attention_supported(int Hq, int Hkv, int hd);
void decode_attention(const DecAttnArgs& a, cudaStream_t s);
// The same for `rows` rows of a batched step (DecAttnArgs stays the single-row kernel's: its layout decides that
// kernel's code): row r's qkv, o, part and counter at r times their single-row sizes, its position and cache from
// rk.rows (layer rk.layer); pos, kc and vc unused. rows_attention: one block per (kv head, row), no key splits
// (splits, part, counter, cluster unused); false where it does not apply (head_dim other than 128, more than 4
// query heads per kv head). decode_attention_rows: the single-row kernel's body per row, its splits merged through
// part/counter (cluster unused).
bool rows_attention(const DecAttnArgs& a, RowsKv rk, int rows, cudaStream_t s);
bool rows_attention_applies(int Hq, int Hkv, int hd); // whether rows_attention takes these heads
void decode_attention_rows(const DecAttnArgs& a, RowsKv rk, int rows, cudaStream_t s);

// Greedy choice: argmax (ties → lowest id) and its log-softmax; writes *tok, ring[*count % ring_size] =
// {id, logprob bits}, ++*count, and ++*pos when advance.
// scratch: ≥ 3·132 floats. Two kernels (per-slice reductions, then the merge).
// With emb, the chosen token's embedding row is also written to emb_out (the next decode step's input); the table
// must pass argmax_can_embed (bf16, 256·n ≤ 2048 columns).
bool argmax_can_embed(const DMat& emb);
void argmax_token(const float* logits, int V, float* scratch, int* tok, int* pos, int* count, int2* ring, int ring_size,
                  bool advance, cudaStream_t s, const DMat* emb = nullptr, float* emb_out = nullptr);
// The products of a batched decode step on the tensor cores (rows_product.cu): y[b, :] (row stride ldy) = W · x[b, :]
// for the B ≤ 16 rows x [B, K], each RMS-normalised first with norm_w (null: as is) and rounded to bf16 (the
// operands the row passes give cuBLAS), float32 sums; epilogues as matvec (SwiGLU: W = [gate; up], N/2 outputs).
// False where it does not apply (nothing launched): rows_product_applies.
constexpr int kRowsProductMaxRows = 16;
bool rows_product_applies(const DMat& W, int B, Epi epi);
bool rows_product(const DMat& W, const float* x, int B, const float* norm_w, float eps, float* y, int ldy, Epi epi,
                  cudaStream_t s);
bool device_has_mma(); // compute capability ≥ 8.0 (the current device)
// Greedy choice per row of logits [n, V]: out[r] = {argmax (ties → lowest id), its log-softmax's bits}; id −1
// where the row has no maximum (non-finite logits). scratch ≥ 3·kArgRowParts·n floats.
constexpr int kArgRowParts = 32;
void argmax_rows(const float* logits, int n, int V, float* scratch, int2* out, cudaStream_t s);
// Beam search's choice per row of logits [B, V] (row_topk.cu): ids/logprobs [B, k] get the row's k largest (value
// descending, ties → lower index; 1 ≤ k ≤ 64) and their log-softmax. scratch: row_topk_scratch_floats(B, k) floats.
constexpr int kTopkSlices = 64;
size_t row_topk_scratch_floats(int B, int k);
void row_topk(const float* logits, int B, int V, int k, float* scratch, int* ids, float* logprobs, cudaStream_t s);
// The argmax's second stage alone: merges nparts (max, index, Σ exp) partials (lm_head_argmax's) into *tok, the
// ring and the counters, as argmax_token. With xpart (screened_head_argmax's nx partials), those choose the token
// and give its logit; part then holds the proxy head's partials, which give the log-probability's normaliser.
void argmax_merge(const float* logits, const float* part, int nparts, int* tok, int* pos, int* count, int2* ring,
                  int ring_size, bool advance, cudaStream_t s, const DMat* emb = nullptr, float* emb_out = nullptr,
                  const float* xpart = nullptr, int nx = 0);
// The decode step's LM head fused with the argmax's first stage (lm_head.cu): logits = W · RMSNorm(x) and the
// argmax partials in part (≥ 3·max_parts floats). Returns the number of partials, or 0 where it does not apply
// (quantized head, no sm_90, other widths than 1024/2048): then matvec + argmax_token.
int lm_head_argmax(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, float* part,
                   int max_parts, cudaStream_t s);
// The screened greedy head (head_screen.cu) of a bf16 head W [V, K] (K = 1024 or 2048, sm_90): an MLX 8-bit copy
// of W (proxy, group 64, each row's codes followed by its bf16 scales, biases, its bound and padding:
// proxy_row_bytes; lm_head_argmax_proxy, screened_head_choose) and per row
// r a bound R[r] with |proxy logit − W logit| ≤ ‖x̂‖·R[r] for the normalised x̂, both as the device kernels round
// them. build_head_screen makes it on the device (storage keeps the buffers); an empty HeadScreen where the head
// does not qualify.
struct HeadScreen {
    DMat proxy;
    const float* bound = nullptr;
    explicit operator bool() const { return bound != nullptr; }
};
HeadScreen build_head_screen(const DMat& W, std::vector<Buffer>& storage, size_t& bytes);
// The greedy choice through the screen: the proxy head with its argmax partials (lm_head_argmax_proxy into plog and
// part), then per slice of rows the rows whose proxy logit is within the bounds of the best one, rescored with W
// exactly as lm_head_argmax computes W's logits: exact (logit, index, Σ exp correction) partials into xpart
// (≥ 3·max_x floats). The token of argmax_merge(…, xpart, n) is then the full head's (ties → lowest index); its
// log-probability's normaliser takes the rescored rows' exact logits and the other rows' proxy logits. Returns n,
// or 0 where it does not apply (then nothing was launched); *nparts gets part's count. stats (optional) accumulates
// the rows listed for rescoring. bound_scale: 1.01 (tests set 0 to show the bound matters).
int screened_head_argmax(const DMat& W, const HeadScreen& hs, const float* x, const float* norm_w, float eps,
                         float* plog, float* part, int max_parts, int* nparts, float* xpart, int max_x,
                         unsigned* stats, cudaStream_t s, float bound_scale = 1.01f);

// The same greedy choice as one kernel (head_fused.cu; sm_90, K = 1024 or 2048): the proxy on the tensor cores (x̂ in
// steps of max|x̂|/16256 as two signed bytes), per block its argmax partial and the screen's bounds in rec (≥ 8 floats
// per SM; max_rec records), and the last block to arrive (counter: zero before the first call, zero after each)
// rescores the candidates and writes *tok, the ring, the counters and emb's row as argmax_merge does. plog gets the
// proxy logits. False where it does not apply (nothing launched) or QASR_CUDA_HEAD_FUSED=0.
bool screened_head_choose(const DMat& W, const HeadScreen& hs, const float* x, const float* norm_w, float eps, float* plog,
                          float* rec, int max_rec, unsigned* counter, int* tok, int* pos, int* count, int2* ring,
                          int ring_size, bool advance, const DMat* emb, float* emb_out, unsigned* stats, cudaStream_t s,
                          float bound_scale = 1.01f);
// lm_head_argmax of an MLX 8-bit head in packed rows (codes, scales, biases; W.scales and W.biases null) with x̂
// rounded to int16 (steps of max|x̂|/32767; integer dot products):
// the screened head's proxy, not exact logits of W. 0 where it does not apply.
int lm_head_argmax_proxy(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, float* part,
                         int max_parts, cudaStream_t s);
// Programmatic dependent launch for the decode-step kernels (default on; QASR_CUDA_PDL=0 turns it off).
void set_pdl(bool on);
void set_ints(int* p, int a, int b, cudaStream_t s); // p[0] = a, p[1] = b
// Profiling builds (-DQASR_CUDA_TIMELINE): the device buffer (detail::Timeline) the kernels of each file stamp.
void timeline_bind_kernels(void* tl);
void timeline_bind_prefetch(void* tl);
void timeline_bind_attention(void* tl);
void timeline_bind_head(void* tl);
void timeline_bind_screen(void* tl);

// Log-mel [n_mels, T] of N samples (x holds the first n_have, zeros after) exactly as audio/mel (spec §3), in double
// like the CPU front end: the DFT as a GEMM (dft [400, 402]: cos and −sin columns per bin), filters [201, n_mels].
// The frames go through the double-precision stages kLogMelBlock at a time (41 s of audio: 39 MB of work instead of
// ~0.96 MB per second of audio), each block's log10 into the float log-mel of all, whose maximum then clamps them all.
// The products go through g's cublasLt plans (on stream s, so that a pass graph can hold the front end); the work
// buffer's parts start on 256-byte boundaries, as those plans need.
void log_mel(detail::GemmPlans& g, const float* x, int64_t n_have, int64_t N, int T, int n_mels, const double* window,
             const double* dft, const double* filters, double* work, float* out, cudaStream_t s);
constexpr int kLogMelBlock = 4096, kLogMelParts = 256; // frames per block; partial maxima per block
size_t log_mel_work_bytes(int T, int n_mels);
// The DFT basis for log_mel (host): [400, 402], columns 2k and 2k+1 = cos and −sin of 2πjk/400.
std::vector<double> mel_dft_basis();

// Conv stem (3×3, stride 2, padding 1) as im2col + GEMM. Chunk c of the mel [n_mels, T] (rows ld apart): frames
// [c·cf, c·cf+cf) zero-padded past T. Columns ordered (cin, kh, kw) like OIHW weights; kpad ≥ cin·9 columns (zeros
// beyond).
void im2col_mel(const float* mel, int n_mels, int ld, int T, int cf, int C, int kpad, bf16* out, cudaStream_t s);
// in [C, H, W, Ch] → out [C·⌈H/2⌉·⌈W/2⌉, Ch·9]
void im2col(const float* in, int C, int H, int W, int Ch, bf16* out, cudaStream_t s);
// c3 [C, H3, W3, Ch] → out [C·W3, Ch·H3] with column ch·H3 + f (spec §4.3 flatten order)
void flatten_stem(const float* c3, int C, int H3, int W3, int Ch, bf16* out, cudaStream_t s);
// x[r, :] = co[r, :] + pe[r % W3, :] for r < A
void add_pe(const float* co, int A, int d, int W3, const float* pe, float* x, cudaStream_t s);

// C [M, N] (f32) = A [M, K] (bf16) · W [N, K]ᵀ (bf16) + beta · C, float32 accumulation.
void gemm(cublasHandle_t h, const bf16* A, int M, int K, const bf16* W, int N, float* C, float beta);

} // namespace qasr::cuda
