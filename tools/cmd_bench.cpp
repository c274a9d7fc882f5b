// `qasr bench -m DIR [--audio F | --seconds S]`: end-to-end timing of the pipeline stages over N runs after
// warm-up, the decode roofline (weight bytes per token against the DRAM read bandwidth measured in the same
// process) and peak RSS. Prints one fixed summary line and one JSON object (medians over the runs).
#include "args.hpp"
#include "commands.hpp"

#include "audio/audio.hpp"
#include "backend/cpu/blas_core.hpp"
#include "backend/cpu/kernels.hpp"
#include "core/timer.hpp"
#include "model/model.hpp"
#include "ops/ops.hpp"
#include "api/transcriber_impl.hpp"
#include "pipeline/batch_engine.hpp"
#include "pipeline/session.hpp"

#include <nlohmann/json.hpp>

#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

namespace qasr::cli {
namespace {

const char* kHelp = R"(usage: qasr bench -m MODEL_DIR [options]

Runs the whole pipeline (mel, encoder, prefill, decode) N times after warm-up and prints one summary line and
one JSON object with the medians: load/mel/encode/prefill/decode ms, tokens/s, ms/token, RTF, the decode's
achieved weight bandwidth (weight bytes read per token / ms per token) against the DRAM read bandwidth
measured in the same run, and peak RSS. On a GPU with greedy decoding the encoder's rows stay on the device and
the prefill is queued while the encoder runs: "encode" is then the time to queue the encoder, and its remaining
device time counts in "prefill" (the stages still add up to the wall time).

options:
  -m, --model DIR        model directory
  --audio FILE           audio to transcribe (default: generated audio, see --seconds)
  --seconds S            length of the generated audio (default 11)
  --runs N               timed runs (default 3)
  --warmup N             untimed runs first (default 1)
  -t, --threads N        CPU threads (default: all cores)
  --max-new-tokens N     cap on generated tokens
  --ignore-eos           decode exactly --max-new-tokens tokens (fixed decode length)
  --beam-size N          beam search over N hypotheses (1..16; default 1: greedy); ms/token is then per token
                         of the winning hypothesis (each step advances every beam)
  --isa portable|avx2|avx512   force the kernel ISA (default: best supported; env QASR_ISA)
  --device D             cpu (default), cuda or cuda:N: run the model on a GPU (no DRAM probe then)
  --compute C            the CPU's matrix-matrix products: auto (bf16 for quantized checkpoints, float32
                         for float ones; default), bf16 (about half the encoder/prefill time on AMX or
                         AVX512-BF16 CPUs) or f32
  --bw-mb N              size of the bandwidth probe buffer in MiB (default 1024; 0 skips the probe)
  --api-warmup           run Transcriber::warmup() (as load_with_warmup does) before the runs
  --clients N            then RUNS rounds of N concurrent requests (a server's load): per-request latency, the
                         rounds' throughput, the first round apart (it opens the extra sessions), tokens vs one client
  --batch N              with --clients: the same rounds again with the requests decoding together, up to N per
                         step (LoadOptions::max_batch), the throughput ratios and the batched step's time by size
  --json                 print only the JSON object
  -v, --verbose          diagnostics on stderr (load and warm-up stage times)
  --stream               streaming benchmark instead (finalization latency; see qasr stream --help)
)";

// N requests at once on one model, each on its own thread and Session, started together; per request its
// wall time from the common start, and its tokens.
struct ClientRound {
    double wall_ms = 0;
    std::vector<double> request_ms;
    std::vector<std::vector<int>> tokens;
    std::string error;
};

ClientRound client_round(const std::shared_ptr<const Model>& model, const std::vector<float>& audio,
                         const TranscribeOptions& opts, int n, BatchEngine* engine) {
    ClientRound r;
    r.request_ms.assign(size_t(n), 0.0);
    r.tokens.resize(size_t(n));
    std::vector<std::string> errors(static_cast<size_t>(n));
    std::vector<std::thread> th;
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    Stopwatch sw;
    const auto start = [&] {
        {
            std::lock_guard<std::mutex> lk(mu);
            sw.reset();
            go = true;
        }
        cv.notify_all();
    };
    try {
        for (int k = 0; k < n; ++k)
            th.emplace_back([&, k] {
                {
                    std::unique_lock<std::mutex> lk(mu);
                    cv.wait(lk, [&] { return go; });
                }
                try {
                    std::unique_ptr<Session> s;
                    if (!engine) s = std::make_unique<Session>(model);
                    const TranscriptionResult t = engine ? engine->run(audio, opts) : s->run(audio, opts);
                    for (const TokenInfo& ti : t.tokens) r.tokens[size_t(k)].push_back(ti.id);
                } catch (const std::exception& e) {
                    errors[size_t(k)] = e.what();
                }
                r.request_ms[size_t(k)] = sw.ms();
            });
    } catch (...) { // a thread could not be started: release the ones waiting, then report
        start();
        for (auto& t : th) t.join();
        throw;
    }
    start();
    for (auto& t : th) t.join();
    r.wall_ms = sw.ms();
    for (const auto& e : errors)
        if (!e.empty()) r.error = e;
    return r;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// DRAM read bandwidth: every thread of the team streams its share of a large buffer (the active ISA's summing
// kernel, software prefetch as in the decode kernels); best of 5 passes after one warm-up, GB/s (1e9 bytes).
double measure_read_bandwidth(size_t mib) {
    // The buffer sits on transparent huge pages (like the weights read through the mapping with MADV_HUGEPAGE, or
    // the QASR_WEIGHTS=hugepages arena): on 4 KiB pages the probe reads ≈15% slower on the benchmark machine, which
    // would flatter the decode's fraction.
    const int64_t n = int64_t(mib) * 1024 * 1024 / 4;
    const size_t H = size_t(2) << 20, bytes = (size_t(n) * 4 + H - 1) / H * H;
    void* mem = ::mmap(nullptr, bytes + H, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 0.0;
    float* buf = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(mem) + H - 1) & ~uintptr_t(H - 1));
    ::madvise(buf, bytes, MADV_HUGEPAGE);
    std::fill(buf, buf + n, 1.0f);
    const cpu::KernelTable& k = cpu::kernels();
    const int nt = ops::num_threads();
    double best = 0;
    volatile float sink = 0;
    for (int pass = 0; pass < 6; ++pass) {
        float total = 0;
        Stopwatch sw;
#pragma omp parallel num_threads(nt) reduction(+ : total)
        {
            const int64_t per = (n / nt + 15) / 16 * 16, t = omp_get_thread_num();
            const int64_t a0 = std::min(n, t * per), a1 = std::min(n, a0 + per);
            total += k.sum(buf + a0, a1 - a0);
        }
        const double s = sw.ms() / 1000.0;
        sink = sink + total;
        if (pass > 0) best = std::max(best, double(n) * 4.0 / s / 1e9);
    }
    ::munmap(mem, bytes + H);
    return best;
}

// The decode's matrix-vector products alone, in the decoder's order (q/k/v, o, gate/up, down per layer, then the
// LM head) on random inputs: ms per token, median over `reps` passes after one warm-up. The difference to the
// decode's ms/token is the rest of a step (attention over the KV cache, norms, RoPE, sampling).
double matvec_ms_per_token(const DecoderW& D, int reps) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const int64_t d = D.layers.empty() ? D.embed.cols : D.layers[0].q.w.cols;
    const int64_t dq = D.layers.empty() ? d : D.layers[0].o.w.cols, inter = D.layers.empty() ? d : D.layers[0].down.w.cols;
    Tensor x({1, d}), xo({1, dq}), h({1, inter}), q, k, v, g, up;
    for (Tensor* t : {&x, &xo, &h})
        for (float& f : t->data) f = u(rng);
    const WeightMatrix& head = D.lm_head.empty() ? D.embed : D.lm_head;
    ops::Bf16GemmScope precision(D.bf16_compute);
    std::vector<double> ms;
    for (int i = 0; i <= reps; ++i) {
        Stopwatch sw;
        for (const auto& l : D.layers) {
            ops::linear_multi(x, {&l.q.w, &l.k.w, &l.v.w}, {&q, &k, &v});
            Tensor a = ops::linear(xo, l.o.w);
            ops::linear_multi(x, {&l.gate.w, &l.up.w}, {&g, &up});
            Tensor dn = ops::linear(h, l.down.w);
        }
        Tensor logits = ops::linear(x, head);
        if (i > 0) ms.push_back(sw.ms());
    }
    return median(ms);
}

std::vector<float> generated_audio(double seconds) {
    const size_t n = size_t(seconds * 16000);
    std::vector<float> a(n);
    std::mt19937 rng(7);
    std::normal_distribution<float> noise(0.0f, 0.02f);
    for (size_t i = 0; i < n; ++i) {
        const double t = double(i) / 16000.0;
        const double f0 = 140.0 + 30.0 * std::sin(2 * M_PI * 0.7 * t);
        a[i] = float(0.3 * std::sin(2 * M_PI * f0 * t) * (0.5 + 0.5 * std::sin(2 * M_PI * 3.0 * t))) + noise(rng);
    }
    return a;
}

} // namespace

int cmd_bench(int argc, char** argv) {
    for (int i = 2; i < argc; ++i) // `qasr bench --stream ...` is the streaming benchmark of `qasr stream --bench`
        if (std::string(argv[i]) == "--stream") return cmd_stream(argc, argv);
    Args a(argc, argv, 2);
    std::string model_dir, audio_path, v, isa, device = "cpu", compute = "auto";
    double seconds = 11.0;
    int runs = 3, warmup = 1, threads = 0, clients = 1, batch = 1;
    size_t bw_mb = 1024;
    bool json_only = false, api_warmup = false;
    TranscribeOptions opts;
    opts.itn = false;
    while (!a.done()) {
        if (a.flag("-h") || a.flag("--help")) {
            std::fputs(kHelp, stdout);
            return 0;
        } else if (a.option("-m", v) || a.option("--model", v)) {
            model_dir = v;
        } else if (a.option("--audio", v)) {
            audio_path = v;
        } else if (a.option("--seconds", v)) {
            seconds = to_double("--seconds", v, 0.1, 3600);
        } else if (a.option("--runs", v)) {
            runs = int(to_long("--runs", v, 1, 1000));
        } else if (a.option("--warmup", v)) {
            warmup = int(to_long("--warmup", v, 0, 1000));
        } else if (a.option("--threads", v) || a.option("-t", v)) {
            threads = int(to_long("--threads", v, 1, 1024));
        } else if (a.option("--max-new-tokens", v)) {
            opts.decode.max_new_tokens = int(to_long("--max-new-tokens", v, 1, 1 << 20));
        } else if (a.flag("--ignore-eos")) {
            opts.decode.ignore_eos = true;
        } else if (a.option("--beam-size", v)) {
            opts.decode.beam_size = int(to_long("--beam-size", v, 1, 16));
        } else if (a.option("--isa", v)) {
            isa = v;
        } else if (a.option("--device", v)) {
            device = v;
        } else if (a.option("--compute", v)) {
            compute = v;
        } else if (a.option("--bw-mb", v)) {
            bw_mb = size_t(to_long("--bw-mb", v, 0, 1 << 20));
        } else if (a.flag("--api-warmup")) {
            api_warmup = true;
        } else if (a.option("--clients", v)) {
            clients = int(to_long("--clients", v, 1, 256));
        } else if (a.option("--batch", v)) {
            batch = int(to_long("--batch", v, 1, 1024));
        } else if (a.flag("--json")) {
            json_only = true;
        } else if (a.flag("-v") || a.flag("--verbose")) {
            log_verbose();
        } else {
            throw std::invalid_argument("bench: unknown argument " + a.peek());
        }
    }
    if (model_dir.empty()) throw std::invalid_argument("bench: -m MODEL_DIR is required");
    if (opts.decode.ignore_eos && opts.decode.max_new_tokens <= 0)
        throw std::invalid_argument("bench: --ignore-eos needs --max-new-tokens");
    if (batch > 1 && clients < 2) throw std::invalid_argument("bench: --batch needs --clients N (N ≥ 2)");
    ops::set_num_threads(threads);
    if (!isa.empty()) {
        const cpu::Isa want = isa == "portable" ? cpu::Isa::Portable : isa == "avx2" ? cpu::Isa::Avx2
                              : isa == "avx512" ? cpu::Isa::Avx512 : throw std::invalid_argument("bench: --isa " + isa);
        cpu::set_isa(want);
    }

    const std::vector<float> audio = audio_path.empty() ? generated_audio(seconds) : load_audio_file(audio_path);
    Stopwatch sw;
    LoadOptions lo;
    lo.threads = threads;
    lo.device = device;
    lo.compute = compute;
    const Transcriber asr = Transcriber::load(model_dir, lo);
    const double load_ms = sw.ms();
    sw.reset();
    if (api_warmup) asr.warmup(); // what load_with_warmup() does
    const double warmup_ms = api_warmup ? sw.ms() : 0.0;
    const std::shared_ptr<const Model> model = asr.impl().model;

    // Decode weight bytes per token: every decoder matrix plus the LM head (the embedding when tied).
    const DecoderW& D = model->weights.dec;
    size_t bytes_tok = (D.lm_head.empty() ? D.embed : D.lm_head).bytes();
    for (const auto& l : D.layers)
        for (const Linear* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) bytes_tok += m->w.bytes();
    const std::string fmt_dec = D.layers.empty() ? "?" : D.layers[0].q.w.format_name();
    const std::string fmt_head = (D.lm_head.empty() ? D.embed : D.lm_head).format_name();
    const std::string fmt_enc =
        model->weights.enc.layers.empty() ? "?" : model->weights.enc.layers[0].fc1.w.format_name();

    std::vector<double> mel, enc, pre, dec, tot, rtf, call;
    int n_tokens = 0, n_prompt = 0;
    std::vector<int> one_client_tokens;
    for (int i = 0; i < warmup + runs; ++i) {
        Stopwatch cw; // the whole call as a caller sees it: the session opened, the transcription, the session closed
        TranscriptionResult r;
        {
            Session s(model);
            r = s.run(audio, opts);
        }
        const double call_ms = cw.ms();
        one_client_tokens.clear();
        for (const TokenInfo& ti : r.tokens) one_client_tokens.push_back(ti.id);
        n_tokens = int(r.tokens.size());
        n_prompt = r.n_prompt_tokens;
        if (i < warmup) continue;
        mel.push_back(r.timings.mel_ms);
        enc.push_back(r.timings.encode_ms);
        pre.push_back(r.timings.prefill_ms);
        dec.push_back(r.timings.decode_ms);
        tot.push_back(r.timings.total_ms());
        call.push_back(call_ms);
        rtf.push_back(r.rtf);
    }
    // Concurrent clients (a server's load): the first round opens the sessions the pool lacks. With --batch, the
    // same rounds again through a BatchEngine (one engine thread decoding the requests together).
    const double audio_s = double(audio.size()) / 16000.0;
    const auto client_rounds = [&](BatchEngine* engine) {
        std::vector<double> req, walls;
        ClientRound first;
        int same = 0, all = 0;
        for (int i = 0; i < runs + 1; ++i) {
            ClientRound c = client_round(model, audio, opts, clients, engine);
            if (!c.error.empty()) throw std::runtime_error("bench: a concurrent request failed: " + c.error);
            for (const auto& t : c.tokens) same += t == one_client_tokens, ++all;
            if (i == 0) {
                first = c;
                continue;
            }
            req.insert(req.end(), c.request_ms.begin(), c.request_ms.end());
            walls.push_back(c.wall_ms);
        }
        return nlohmann::json{{"n", clients},
                              {"rounds", runs},
                              {"request_ms_median", median(req)},
                              {"request_ms_max", req.empty() ? 0.0 : *std::max_element(req.begin(), req.end())},
                              {"round_ms_median", median(walls)},
                              {"throughput_x_realtime", clients * audio_s / (median(walls) / 1000.0)},
                              {"one_client_throughput_x_realtime", audio_s / (median(tot) / 1000.0)},
                              {"first_round_ms", first.wall_ms},
                              {"first_round_request_ms_max",
                               *std::max_element(first.request_ms.begin(), first.request_ms.end())},
                              {"requests_with_one_clients_tokens", same},
                              {"requests", all}};
    };
    nlohmann::json cj, bj;
    if (clients > 1) cj = client_rounds(nullptr);
    if (clients > 1 && batch > 1) {
        BatchEngine engine(model, batch);
        bj = client_rounds(&engine);
        const BatchEngine::Stats st = engine.stats();
        bj["max_batch"] = batch;
        bj["engine_steps"] = st.steps;
        bj["rows_per_step"] = st.steps ? double(st.rows) / double(st.steps) : 0.0;
        bj["throughput_vs_unbatched"] =
            bj["throughput_x_realtime"].get<double>() / cj["throughput_x_realtime"].get<double>();
        bj["throughput_vs_one_client"] =
            bj["throughput_x_realtime"].get<double>() / cj["one_client_throughput_x_realtime"].get<double>();
        // The batched step alone: B sessions prefilled with the audio, 20 steps of B rows each (median step).
        std::vector<std::unique_ptr<Session>> ss;
        nlohmann::json steps = nlohmann::json::object(), first_steps = nlohmann::json::object();
        TranscribeOptions so = opts; // on a device: greedy rows with room for every step below
        so.decode.ignore_eos = true;
        so.decode.max_new_tokens = 21 * 12;
        std::unique_ptr<DeviceBatch> db = model->device ? model->device->open_batch(batch) : nullptr;
        for (int B = 1; B <= batch; B *= 2) {
            while (int(ss.size()) < B) {
                ss.push_back(std::make_unique<Session>(model));
                ss.back()->begin(audio, so);
                if (db) ss.back()->begin_device_batch();
            }
            std::vector<Session*> ptr;
            for (int b = 0; b < B; ++b) ptr.push_back(ss[size_t(b)].get());
            std::vector<int> toks(size_t(B), 100), ids(toks.size());
            std::vector<float> lps(toks.size());
            std::vector<double> ms;
            for (int i = 0; i < 21; ++i) {
                Stopwatch step_sw;
                if (db) Session::step_batch_device(ptr.data(), toks.data(), size_t(B), *db, ids.data(), lps.data());
                else Session::step_batch(ptr.data(), toks.data(), size_t(B));
                ms.push_back(step_sw.ms());
            }
            // a shape's first steps (on a device: eager, then captured as a graph) apart from the steady median
            first_steps[std::to_string(B)] = {ms[0], ms[1]};
            steps[std::to_string(B)] = median(std::vector<double>(ms.begin() + 2, ms.end()));
        }
        bj["step_ms_by_batch"] = steps;
        bj["first_two_steps_ms_by_batch"] = first_steps;
    }
    // The first token comes from the prefill's logits; each further token is one decoder step.
    const int steps = std::max(1, n_tokens - 1);
    const double dec_ms = median(dec), ms_tok = dec_ms / steps;
    const double dec_gbps = double(bytes_tok) / (ms_tok / 1000.0) / 1e9;
    const TextHParams& t = model->hp.text;
    const double kv_elem = kv_cache_bf16(D.bf16_compute) ? 2.0 : 4.0; // bf16 cache for quantized checkpoints
    const double kv_bytes_tok = 2.0 * t.n_layers * (n_prompt + steps / 2.0) * t.n_kv_heads * t.head_dim * kv_elem;
    // Peak RSS of the model runs (mapped weight pages included), taken before the probe allocates its buffer.
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const double rss_mb = double(ru.ru_maxrss) / 1024.0;
    const double mv_ms = model->device ? 0.0 : matvec_ms_per_token(D, 10);
    const double dram = bw_mb && !model->device ? measure_read_bandwidth(bw_mb) : 0.0; // host DRAM: CPU runs only

    nlohmann::json j = {{"model", model_dir},
                        {"weights", {{"decoder", fmt_dec}, {"head", fmt_head}, {"encoder", fmt_enc}}},
                        {"device", model->device ? model->device->name() : std::string("cpu")},
                        {"isa", cpu::kernels().name},
                        {"products", model->device ? std::string("device")
                                     : model->weights.dec.bf16_compute && std::string(ops::bf16_gemm_engine()) != "none"
                                         ? std::string("bf16 ") + ops::bf16_gemm_engine()
                                         : std::string("f32/") + ops::f32_gemm_engine()},
                        {"blas_core", cpu::blas_core()}, // OpenBLAS's kernel family (the float32 products)
                        {"threads", ops::num_threads()},
                        {"audio_seconds", double(audio.size()) / 16000.0},
                        {"runs", runs},
                        {"warmup", warmup},
                        {"prompt_tokens", n_prompt},
                        {"tokens", n_tokens},
                        {"beam_size", opts.decode.beam_size},
                        {"load_ms", load_ms},
                        {"mel_ms", median(mel)},
                        {"encode_ms", median(enc)},
                        {"prefill_ms", median(pre)},
                        {"decode_ms", dec_ms},
                        {"total_ms", median(tot)},
                        {"first_total_ms", tot.empty() ? 0.0 : tot.front()},
                        // total_ms plus opening and closing the session (what a caller of Session::run waits for)
                        {"call_ms", median(call)},
                        // the first timed run's stages (after --api-warmup: the first transcription after the warm-up)
                        {"first_ms", {{"mel", mel.empty() ? 0.0 : mel.front()}, {"encode", enc.empty() ? 0.0 : enc.front()},
                                      {"prefill", pre.empty() ? 0.0 : pre.front()}, {"decode", dec.empty() ? 0.0 : dec.front()}}},
                        {"max_total_ms", tot.empty() ? 0.0 : *std::max_element(tot.begin(), tot.end())},
                        {"api_warmup_ms", warmup_ms},
                        {"tokens_per_s", 1000.0 / ms_tok},
                        {"ms_per_token", ms_tok},
                        {"rtf", median(rtf)},
                        {"decode_weight_bytes_per_token", bytes_tok},
                        {"decode_kv_bytes_per_token", kv_bytes_tok},
                        {"decode_GBps", dec_gbps},
                        {"dram_read_GBps", dram},
                        {"decode_bw_fraction", dram > 0 ? dec_gbps / dram : 0.0},
                        {"matvec_ms_per_token", mv_ms},
                        {"matvec_GBps", mv_ms > 0 ? double(bytes_tok) / (mv_ms / 1000.0) / 1e9 : 0.0},
                        {"peak_rss_MB", rss_mb},
                        // device memory the idle pooled sessions keep after the runs (KV caches, prefill and encoder
                        // scratch; a session over the pool limit is freed instead)
                        {"device_pooled_MB", model->device ? double(model->device->pooled_bytes()) / 1048576.0 : 0.0}};
    if (clients > 1) j["clients"] = cj;
    if (!bj.is_null()) j["clients_batched"] = bj;
    if (!json_only)
        std::printf("bench dec=%s head=%s enc=%s isa=%s products=%s threads=%d audio=%.2fs runs=%d | load %.0f ms | mel %.1f "
                    "encode %.1f prefill %.1f decode %.1f ms (%d tok) | %.2f ms/tok %.1f tok/s | RTF %.3f | decode "
                    "%.2f GB/s of %.2f GB/s DRAM (%.0f%%) | peak RSS %.0f MB\n",
                    fmt_dec.c_str(), fmt_head.c_str(), fmt_enc.c_str(), cpu::kernels().name,
                    j["products"].get<std::string>().c_str(), ops::num_threads(),
                    double(audio.size()) / 16000.0, runs, load_ms, median(mel), median(enc), median(pre), dec_ms,
                    n_tokens, ms_tok, 1000.0 / ms_tok, median(rtf), dec_gbps, dram,
                    dram > 0 ? 100.0 * dec_gbps / dram : 0.0, rss_mb);
    if (!json_only && clients > 1)
        std::printf("clients %d: request median %.2f ms (max %.2f), round %.2f ms, %.1fx real time (one client %.1fx); "
                    "first round %.2f ms; %d/%d requests with the one-client tokens\n",
                    clients, cj["request_ms_median"].get<double>(), cj["request_ms_max"].get<double>(),
                    cj["round_ms_median"].get<double>(), cj["throughput_x_realtime"].get<double>(),
                    cj["one_client_throughput_x_realtime"].get<double>(), cj["first_round_ms"].get<double>(),
                    cj["requests_with_one_clients_tokens"].get<int>(), cj["requests"].get<int>());
    if (!json_only && !bj.is_null())
        std::printf("clients %d batched (--batch %d): request median %.2f ms (max %.2f), round %.2f ms, %.1fx real time "
                    "= %.2fx the unbatched clients, %.2fx one client; %.2f requests per step; %d/%d requests with the "
                    "one-client tokens\n",
                    clients, batch, bj["request_ms_median"].get<double>(), bj["request_ms_max"].get<double>(),
                    bj["round_ms_median"].get<double>(), bj["throughput_x_realtime"].get<double>(),
                    bj["throughput_vs_unbatched"].get<double>(), bj["throughput_vs_one_client"].get<double>(),
                    bj["rows_per_step"].get<double>(), bj["requests_with_one_clients_tokens"].get<int>(),
                    bj["requests"].get<int>());
    if (!json_only && !bj.is_null())
        for (const auto& [B, ms] : bj["step_ms_by_batch"].items()) {
            const auto& f = bj["first_two_steps_ms_by_batch"][B];
            std::printf("  batched step, %s request(s): %.2f ms (%.2f ms per request; first two %.2f, %.2f ms)\n",
                        B.c_str(), ms.get<double>(), ms.get<double>() / std::stod(B), f[0].get<double>(),
                        f[1].get<double>());
        }
    std::printf("%s\n", json_text(j).c_str());
    return 0;
}

} // namespace qasr::cli
