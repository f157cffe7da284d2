#pragma once
/// A CudaTransformer's weights on the device: every matrix as BF16 in one buffer (q|k|v
/// and gate|up stacked; gate|up interleaved for gemm_mma_silu_bf16 where that kernel
/// serves it), every vector (norms, biases) as FP32 in another. From a checkpoint, or, for
/// a synthetic model (CudaTransformer::random), uniform random BF16 matrices made on the
/// device. Construction only, never a forward's path. model/cuda/ internal.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "model/config.h"
#include "model/cuda/cuda_gemm.h"
#include "model/cuda/transformer_state.h"
#include "model/weights.h"

namespace specpipe::cuda {

/// Lays the weights out, uploads them and sets d's weight pointers (layers, embed,
/// lm_head, final_norm), d.gate_up_silu and d.qkv_rope (where qkv_rope asks and the
/// shape allows: TransformerState::qkv_rope). weights == nullptr: a synthetic model, its
/// matrices uniform in [-1/sqrt(cols), 1/sqrt(cols)) from `seed` (filled on `stream`,
/// then synchronised), norms 1, biases 0 where the config has them. `gemm` is resolved.
/// Adds the bytes allocated to *device_bytes; returns the BF16 matrix bytes a decode step
/// reads (all layers' matrices + lm_head). Throws Error.
size_t upload_weights(TransformerState& d, const ModelConfig& c, const ModelWeights* weights, uint64_t seed,
                      CudaGemm gemm, bool fused_step, bool qkv_rope, cudaStream_t stream, size_t* device_bytes);

}  // namespace specpipe::cuda
