#pragma once
/// Opening a checkpoint on a device: the one place that knows which ForwardModel serves
/// which Device (CPU: Transformer; CUDA: CudaForwardModel, where built).
#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "core/device.h"
#include "model/forward_model.h"

namespace specpipe {

struct ModelOptions {
  Device device;
  /// Device models: the most tokens one forward takes (scratch and GEMM shapes are sized
  /// for it, at most 1024); callers split larger work (ForwardModel::max_forward_tokens).
  int32_t max_forward_tokens = 256;
  /// Device models: forwards of at most 16 tokens as one persistent kernel
  /// (CudaTransformerOptions::fused_step): for a draft model only (not the same bits as
  /// the per-kernel path that longer forwards take). Ignored on the CPU.
  bool fused_step = false;
  int32_t fused_blocks = 0;  ///< the fused kernel's grid (0: one block per SM of fused_sm_share)
  float fused_sm_share = 1.0f;  ///< CudaTransformerOptions::fused_sm_share
  /// Device models: the model's stream takes the device's highest priority (the target,
  /// whose verification is on the critical path while a drafter drafts ahead).
  bool high_priority_stream = false;
  /// Device models: whether one-row GEMMs may launch the next kernel early
  /// (CudaTransformerOptions::one_row_early_launch; off for a draft that drafts ahead).
  bool one_row_early_launch = true;
  /// Device models: the projections' GEMM by name ("auto", "cublaslt", "rows", "mma";
  /// CudaTransformerOptions::gemm). Ignored on the CPU.
  std::string gemm = "auto";
  /// Element type of the model's K/V store (CudaTransformerOptions::kv_dtype): f32, or
  /// bf16 on a device; the CPU backend refuses bf16 (Error(unsupported)).
  DType kv_dtype = DType::f32;
};

/// Whether this build has the CUDA backend.
bool cuda_built();

/// config.json + safetensors -> a model on `options.device`. A device model holds its
/// weights on the device and no KV pool yet (ForwardModel::allocate_kv_pool). Throws
/// specpipe::Error naming the file or tensor at fault, or Error(unsupported) for a
/// device this build or machine lacks.
std::unique_ptr<ForwardModel> open_model(const std::filesystem::path& model_dir, const ModelOptions& options);

/// KV blocks that fill `fraction` of the memory still free on `device`, when every
/// model of `models` gets a pool of that many blocks (the target and draft stores are
/// equally large). Throws Error(unsupported) for the CPU, Error(out_of_capacity) when
/// not even one block fits.
int32_t kv_blocks_for_free_memory(const Device& device, std::span<const ForwardModel* const> models,
                                  int32_t block_size, double fraction);

}  // namespace specpipe
