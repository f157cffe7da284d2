#pragma once
/// specpipe_gpu_generate's command line: its flags, their defaults and their parsing
/// (the flags are listed in gpu_generate.cpp's header and in the usage line).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

struct GenerateOptions {
  std::string target_dir = "models/demo-target", draft_dir = "models/demo-draft",
              golden_path = "tests/data/golden-public.json";
  // A Llama-shaped model (no QK-norm) for the qkv RoPE epilogue's check against the
  // unfused path ("" skips it): the demo pair is Qwen3 and takes the unfused path.
  std::string rope_model_dir = "models/llama-tiny-random";
  int repeat = 3;
  size_t max_cases = 1000;
  CudaTransformerOptions gpu_options;
  std::optional<CudaGemm> draft_gemm;  // the draft model's own GEMM (default: --gemm's)
  bool fused_draft = false;            // the draft's small forwards as one fused kernel
  int32_t fused_blocks = 0;
  bool fused_trace = false;  // report the fused kernel's phase clocks
  bool timing = true;
  // Observed on the H100: the target's last-position logits within 0.049 (cuBLASLt) /
  // 0.066 (row GEMM) of the CPU forward's (kernels/cuda/README.md), 0.0666 with the
  // default GEMM (mma) on 2026-11-25; the fused draft's within 0.055 of the per-kernel
  // draft's, one near-tie in its 16 cases (gap 0.006); none in the plain runs (16 / 16
  // identical). The tolerances: about twice the largest error, a near-tie only where the
  // two tokens' logits are within about one observed error, at most one per check.
  double tie_tol = 0.05;
  double logit_tol = 0.13;
  int max_near_ties = 1;
  std::string synthetic;
  int32_t context = 512;
  int32_t prefill_max = 16384;
  uint64_t seed = 1;
  int iters = 30;
  bool offload_check_mode = false, offload_bench_mode = false, prefill_bench_mode = false;
  int32_t chunk = 1024;  // --prefill-bench: tokens a prefill forward (the most CudaTransformer takes)
  int32_t ring_slots = 4;
  int32_t pool_tokens = 0;  // --offload-bench: tokens kept in the GPU pool (0: automatic)
  std::string prefill_ways = "chunked,layerwise,sync";  // --prefill-bench: the offloaded ways
};

/// Parses argv into `o`. Returns 0, or 2 after printing the problem (a bad --kv-dtype or
/// --gemm value) or the usage line (an unknown argument) on stderr; a flag without its
/// value exits 2 (ArgReader).
int parse_generate_options(int argc, char** argv, GenerateOptions& o);

}  // namespace specpipe::gpu_tool
