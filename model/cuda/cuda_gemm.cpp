#include "model/cuda/cuda_gemm.h"

#include "core/error.h"

namespace specpipe {
namespace {

bool widths_multiple_of(const ModelConfig& c, int64_t n) {
  return c.hidden_size % n == 0 && c.q_dim() % n == 0 && c.intermediate_size % n == 0;
}

}  // namespace

const char* to_string(CudaGemm gemm) {
  switch (gemm) {
    case CudaGemm::automatic: return "auto";
    case CudaGemm::cublaslt: return "cublaslt";
    case CudaGemm::rows: return "rows";
    case CudaGemm::mma: return "mma";
  }
  return "?";
}

CudaGemm parse_cuda_gemm(const std::string& name) {
  for (CudaGemm g : {CudaGemm::automatic, CudaGemm::cublaslt, CudaGemm::rows, CudaGemm::mma})
    if (name == to_string(g)) return g;
  fail(ErrorCode::invalid_argument, "unknown GEMM '{}' (auto, cublaslt, rows or mma)", name);
}

CudaGemm resolve_cuda_gemm(CudaGemm requested, const ModelConfig& config, bool fused_step) {
  // mma streams decode's weights fastest (kernels/cuda/README.md, "Sixth session").
  const bool mma_fits = widths_multiple_of(config, 32);
  if (requested == CudaGemm::automatic) return mma_fits && !fused_step ? CudaGemm::mma : CudaGemm::cublaslt;
  if (requested == CudaGemm::rows && !widths_multiple_of(config, 8))
    fail(ErrorCode::unsupported,
         "CUDA forward: gemm_rows_bf16 needs hidden, q_dim and intermediate sizes divisible by 8");
  if (requested == CudaGemm::mma && !mma_fits)
    fail(ErrorCode::unsupported,
         "CUDA forward: gemm_mma_bf16 needs hidden, q_dim and intermediate sizes divisible by 32");
  return requested;
}

}  // namespace specpipe
