#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <array>
#include <cstdio>

namespace specpipe::cuda {
namespace {

constexpr uint64_t kMaxWorkspaceBytes = 32u << 20;
constexpr int kCandidates = 16;

#define LT_TRY(call)                                   \
  do {                                                 \
    if (cublasStatus_t st_ = (call); st_ != CUBLAS_STATUS_SUCCESS) return st_; \
  } while (0)

template <typename T>
T algo_config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T value{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &value, sizeof value, &written) != CUBLAS_STATUS_SUCCESS)
    return T{};
  return value;
}

}  // namespace

LtGemm::~LtGemm() { release(); }

void LtGemm::release() {
  for (auto* l : x_layouts_) cublasLtMatrixLayoutDestroy(l);
  for (auto* l : y_layouts_) cublasLtMatrixLayoutDestroy(l);
  x_layouts_.clear();
  y_layouts_.clear();
  if (w_layout_) cublasLtMatrixLayoutDestroy(w_layout_);
  if (op_) cublasLtMatmulDescDestroy(op_);
  if (workspace_) cudaFree(workspace_);
  w_layout_ = nullptr;
  op_ = nullptr;
  workspace_ = nullptr;
  workspace_bytes_ = 0;
}

cublasStatus_t LtGemm::init(cublasLtHandle_t handle, const GemmShape& shape) {
  release();
  handle_ = handle;
  shape_ = shape;
  if (shape.max_m < 1 || shape.n < 1 || shape.k < 1) return CUBLAS_STATUS_INVALID_VALUE;
  const bool bf16 = shape.precision == GemmPrecision::bf16;
  const cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;

  // Column-major view: D (n x m, ld ldy) = W^T-op (n x k) * X (k x m, ld ldx).
  LT_TRY(cublasLtMatmulDescCreate(&op_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_w = CUBLAS_OP_T, trans_x = CUBLAS_OP_N;
  LT_TRY(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSA, &trans_w, sizeof trans_w));
  LT_TRY(cublasLtMatmulDescSetAttribute(op_, CUBLASLT_MATMUL_DESC_TRANSB, &trans_x, sizeof trans_x));
  LT_TRY(cublasLtMatrixLayoutCreate(&w_layout_, in_type, static_cast<uint64_t>(shape.k),
                                    static_cast<uint64_t>(shape.n), shape.k));
  for (int32_t m = 1; m <= shape.max_m; ++m) {
    cublasLtMatrixLayout_t x = nullptr, y = nullptr;
    LT_TRY(cublasLtMatrixLayoutCreate(&x, in_type, static_cast<uint64_t>(shape.k), static_cast<uint64_t>(m),
                                      shape.ldx));
    x_layouts_.push_back(x);
    LT_TRY(cublasLtMatrixLayoutCreate(&y, CUDA_R_32F, static_cast<uint64_t>(shape.n), static_cast<uint64_t>(m),
                                      shape.ldy));
    y_layouts_.push_back(y);
  }

  cublasLtMatmulPreference_t pref = nullptr;
  LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_ws = kMaxWorkspaceBytes;
  const uint32_t reduction_mask = CUBLASLT_REDUCTION_SCHEME_NONE;
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, sizeof max_ws);
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction_mask,
                                              sizeof reduction_mask);
  std::array<cublasLtMatmulHeuristicResult_t, kCandidates> results{};
  int returned = 0;
  const int32_t top = shape.max_m - 1;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(handle, op_, w_layout_, x_layouts_[top], y_layouts_[top], y_layouts_[top],
                                        pref, kCandidates, results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS) return st;

  for (int c = 0; c < returned; ++c) {
    const cublasLtMatmulAlgo_t& algo = results[static_cast<size_t>(c)].algo;
    if (algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM) > 1 ||
        algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME) != CUBLASLT_REDUCTION_SCHEME_NONE)
      continue;
    size_t ws = 0;
    bool fits_every_m = true;
    for (int32_t m = 1; m <= shape.max_m && fits_every_m; ++m) {
      cublasLtMatmulHeuristicResult_t check{};
      const size_t i = static_cast<size_t>(m - 1);
      fits_every_m = cublasLtMatmulAlgoCheck(handle, op_, w_layout_, x_layouts_[i], y_layouts_[i], y_layouts_[i],
                                             &algo, &check) == CUBLAS_STATUS_SUCCESS &&
                     check.workspaceSize <= kMaxWorkspaceBytes;
      ws = std::max(ws, check.workspaceSize);
    }
    if (!fits_every_m) continue;
    algo_ = algo;
    if (ws > 0 && cudaMalloc(&workspace_, ws) != cudaSuccess) return CUBLAS_STATUS_ALLOC_FAILED;
    workspace_bytes_ = ws;
    char text[200];
    std::snprintf(text, sizeof text,
                  "candidate %d of %d: algo %d tile %u stages %u splitk %d reduction %u swizzle %u custom %u "
                  "cluster %u ws %zu",
                  c, returned, algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_ID),
                  algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_TILE_ID),
                  algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_STAGES_ID),
                  algo_config<int32_t>(algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
                  algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
                  algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
                  algo_config<uint32_t>(algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION),
                  static_cast<unsigned>(algo_config<uint16_t>(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID)), ws);
    description_ = text;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t LtGemm::run(const void* x, const void* w, float* y, int32_t m, cudaStream_t stream) const {
  if (m < 1 || m > shape_.max_m || !op_) return CUBLAS_STATUS_INVALID_VALUE;
  const float alpha = 1.0f, beta = 0.0f;
  const size_t i = static_cast<size_t>(m - 1);
  return cublasLtMatmul(handle_, op_, &alpha, w, w_layout_, x, x_layouts_[i], &beta, y, y_layouts_[i], y,
                        y_layouts_[i], &algo_, workspace_, workspace_bytes_, stream);
}

}  // namespace specpipe::cuda
