#include "model/open_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/load_model.h"
#include "model/safetensors.h"
#ifdef SPECPIPE_HAVE_CUDA
#include "model/cuda/cuda_forward_model.h"
#endif

namespace specpipe {

bool cuda_built() {
#ifdef SPECPIPE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<ForwardModel> open_model(const std::filesystem::path& model_dir, const ModelOptions& options) {
  if (options.device.kind == DeviceKind::cpu) {
    if (options.kv_dtype != DType::f32)
      fail(ErrorCode::unsupported, "kv.dtype {}: the CPU backend keeps FP32 K/V (bf16 is for CUDA devices)",
           dtype_name(options.kv_dtype));
    return load_transformer(model_dir);
  }
#ifdef SPECPIPE_HAVE_CUDA
  ModelConfig config = ModelConfig::from_dir(model_dir);
  const ModelWeights weights = load_weights(config, SafetensorsArchive::open(model_dir));
  CudaTransformerOptions o;
  o.device = options.device.index;
  o.max_tokens = options.max_forward_tokens;
  o.fused_step = options.fused_step;
  o.fused_blocks = options.fused_blocks;
  o.fused_sm_share = options.fused_sm_share;
  o.high_priority_stream = options.high_priority_stream;
  o.one_row_early_launch = options.one_row_early_launch;
  o.gemm = parse_cuda_gemm(options.gemm);
  o.kv_dtype = options.kv_dtype;
  // Decode steps and verify windows of a few sequences replay graphs; prefill runs eagerly.
  o.graph_max_tokens = std::min(o.max_tokens, 64);
  return std::make_unique<CudaForwardModel>(
      std::make_unique<CudaTransformer>(config, weights, /*kv_blocks=*/0, /*block_size=*/16, o));
#else
  fail(ErrorCode::unsupported, "device {}: this build has no CUDA backend (configure with -DSPECPIPE_CUDA=ON)",
       options.device.to_string());
#endif
}

int32_t kv_blocks_for_free_memory(const Device& device, std::span<const ForwardModel* const> models,
                                  int32_t block_size, double fraction) {
  if (device.kind == DeviceKind::cpu)
    fail(ErrorCode::unsupported, "kv.tokens: auto sizes a device's KV pool; on the CPU give a number of tokens");
  if (!(fraction > 0.0 && fraction <= 1.0))
    fail(ErrorCode::invalid_argument, "kv.memory_fraction must be in (0, 1], got {}", fraction);
#ifdef SPECPIPE_HAVE_CUDA
  int64_t per_block = 0;
  for (const ForwardModel* m : models) per_block += m->kv_block_bytes(block_size);
  const DeviceMemory memory = device_memory(device.index);
  const auto budget = static_cast<int64_t>(std::floor(static_cast<double>(memory.free) * fraction));
  const int64_t blocks = per_block > 0 ? budget / per_block : 0;
  if (blocks < 1)
    fail(ErrorCode::out_of_capacity, "{}: {} MiB free, not enough for one KV block of {} bytes", device.to_string(),
         memory.free >> 20, per_block);
  return static_cast<int32_t>(std::min<int64_t>(blocks, INT32_MAX));
#else
  (void)models;
  (void)block_size;
  fail(ErrorCode::unsupported, "device {}: this build has no CUDA backend", device.to_string());
#endif
}

}  // namespace specpipe
