// Matrix products through cublasLt with cached plans (gemm.hpp).
#include "backend/cuda/gemm.hpp"

#include "backend/cuda/kernels.cuh"

#include "core/error.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace qasr::cuda::detail {

namespace {
constexpr size_t kWorkspace = 32u << 20; // as cublasGemmEx's default on sm_90
const bool g_lt_on = [] { // QASR_CUDA_GEMM_LT=0: every product through cublasGemmEx (A/B)
    const char* e = std::getenv("QASR_CUDA_GEMM_LT");
    return !(e && std::string(e) == "0");
}();
const bool g_bands = [] { // QASR_CUDA_GEMM_BANDS=0: the heuristic's answer for every M from the start (gemm.hpp)
    const char* e = std::getenv("QASR_CUDA_GEMM_BANDS");
    return !(e && std::string(e) == "0");
}();
} // namespace

GemmPlans::GemmPlans(cublasHandle_t blas, cudaStream_t s) : blas_(blas), s_(s) {
    if (!g_lt_on) return;
    QASR_CUBLAS(cublasLtCreate(&lt_));
}

GemmPlans::~GemmPlans() {
    for (auto& [k, p] : plans_) destroy(p);
    for (auto& [k, p] : plans64_) destroy(p);
    if (lt_) cublasLtDestroy(lt_);
}

void GemmPlans::destroy(Plan& p) noexcept {
    if (p.la) cublasLtMatrixLayoutDestroy(p.la);
    if (p.lb) cublasLtMatrixLayoutDestroy(p.lb);
    if (p.lc) cublasLtMatrixLayoutDestroy(p.lc);
    if (p.op) cublasLtMatmulDescDestroy(p.op);
    p = Plan{};
}

void GemmPlans::matmul(Plan& p, const void* alpha, const void* A, const void* B, const void* beta, void* C, cudaStream_t s) {
    if (!ws_.get()) ws_.alloc(kWorkspace);
    QASR_CUBLAS(cublasLtMatmul(lt_, p.op, alpha, A, p.la, B, p.lb, beta, C, p.lc, C, p.lc, &p.algo, ws_.get(), kWorkspace, s));
}

bool GemmPlans::heuristic(Plan& p) {
    cublasLtMatmulPreference_t pref = nullptr;
    QASR_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = kWorkspace;
    cublasLtMatmulHeuristicResult_t res{};
    int got = 0;
    const bool ok =
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoGetHeuristic(lt_, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &got) == CUBLAS_STATUS_SUCCESS &&
        got > 0 && res.state == CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreferenceDestroy(pref);
    if (ok) p.algo = res.algo;
    return ok;
}

GemmPlans::Plan& GemmPlans::plan(int M, int N, int K) {
    const auto key = std::make_tuple(M, N, K);
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    if (plans_.size() >= 512) { // many shapes (long audio of every length): start over (the bands' algorithms stay)
        for (auto& [k, p] : plans_) destroy(p);
        plans_.clear();
    }
    Plan& p = plans_[key];
    // Column-major view, as cublasGemmEx is called: Cᵀ [N, M] = W [N, K] · Aᵀ [K, M].
    QASR_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    QASR_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    QASR_CUBLAS(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, K, N, K));
    QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, K, M, K));
    QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, N, M, N));
    const auto bkey = std::make_tuple(band(M), N, K);
    if (const auto b = bands_.find(bkey); g_bands && b != bands_.end()) {
        cublasLtMatmulHeuristicResult_t chk{};
        if (cublasLtMatmulAlgoCheck(lt_, p.op, p.la, p.lb, p.lc, p.lc, &b->second, &chk) == CUBLAS_STATUS_SUCCESS &&
            chk.workspaceSize <= kWorkspace) {
            p.algo = b->second;
            p.ok = p.banded = true;
            return p;
        }
    }
    if ((p.ok = heuristic(p))) bands_.emplace(bkey, p.algo); // the band's first M decides
    return p;
}

void GemmPlans::run(const __nv_bfloat16* A, int M, int K, const __nv_bfloat16* W, int N, float* C, float beta,
                    cudaStream_t s) {
    if (M <= 0 || N <= 0) return;
    const float alpha = 1.0f;
    if (lt_ && aligned256(A) && aligned256(W) && aligned256(C)) {
        Plan& p = plan(M, N, K);
        if (p.ok && p.banded && s != s_) p.banded = !heuristic(p); // recording off the request's path: this M's own
        if (p.ok) {
            matmul(p, &alpha, W, A, &beta, C, s);
            return;
        }
    }
    // cublasGemmEx runs on the handle's stream (the session's); moving the handle to another stream resets its
    // workspace (an allocation, which a stream capture forbids): a pass recorded off the request's path that needs
    // it is not recorded
    if (s != s_) fail("cuda", "product without a cublasLt plan on a recording stream");
    gemm(blas_, A, M, K, W, N, C, beta); // kernels.cu: cublasGemmEx
}

void GemmPlans::run_f64(int m, int n, int k, const double* A, int lda, const double* B, int ldb, double* C, int ldc,
                        cudaStream_t s) {
    if (m <= 0 || n <= 0) return;
    const double one = 1.0, zero = 0.0;
    if (lt_ && aligned256(A) && aligned256(B) && aligned256(C)) {
        const auto key = std::make_tuple(m, n, k, lda, ldb, ldc);
        auto it = plans64_.find(key);
        if (it == plans64_.end()) {
            if (plans64_.size() >= 64) { // many lengths: start over
                for (auto& [kk, p] : plans64_) destroy(p);
                plans64_.clear();
            }
            Plan& p = plans64_[key];
            QASR_CUBLAS(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_64F, CUDA_R_64F));
            QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_64F, m, k, lda));
            QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_64F, k, n, ldb));
            QASR_CUBLAS(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_64F, m, n, ldc));
            p.ok = heuristic(p);
            it = plans64_.find(key);
        }
        if (it->second.ok) {
            matmul(it->second, &one, A, B, &zero, C, s);
            return;
        }
    }
    if (s != s_) fail("cuda", "double-precision product without a cublasLt plan on a recording stream");
    QASR_CUBLAS(cublasDgemm(blas_, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A, lda, B, ldb, &zero, C, ldc));
}

} // namespace qasr::cuda::detail
