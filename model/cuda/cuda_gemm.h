#pragma once
/// Which batch-invariant GEMM serves a CUDA model's projections (kernels/cuda/gemm.h),
/// the names tools and pipeline files use for them, and the choice `automatic` makes.
#include <string>

#include "model/config.h"

namespace specpipe {

enum class CudaGemm {
  automatic,  ///< the default: mma where it fits and the fused step is off, else cublaslt
  cublaslt,   ///< LtGemm, one pinned algorithm per shape
  rows,       ///< gemm_rows_bf16: a plain kernel, cheaper to launch for decode-sized m
  mma,        ///< gemm_mma_bf16: tensor cores streaming each weight once for up to 64 rows
};

/// "auto", "cublaslt", "rows", "mma" (the names tools take on their command lines).
const char* to_string(CudaGemm gemm);

/// The CudaGemm of such a name; throws Error(invalid_argument) naming the choices.
CudaGemm parse_cuda_gemm(const std::string& name);

/// The GEMM a model of `config` runs for `requested`: automatic becomes mma where the
/// model's widths (hidden, q_dim, intermediate: every k) are multiples of 32, unless the
/// model takes the fused step (a draft: its longer forwards keep cuBLASLt, so its bits
/// stay those measured with it), else cublaslt. Throws Error(unsupported) when an
/// explicit choice does not fit the widths (rows: multiples of 8; mma: of 32).
CudaGemm resolve_cuda_gemm(CudaGemm requested, const ModelConfig& config, bool fused_step);

}  // namespace specpipe
