#pragma once
/// The GPU check of offload (issue 16, items 3-4 on CUDA): a sequence whose oldest blocks
/// move to a pinned host tier as it grows, its K/V streamed through the device layer
/// ring, must give the same logits, bit for bit, as the same sequence with every block
/// in the GPU pool: prefill chunks, decode steps, a verify window, a rollback below the
/// host boundary (a host block back to the pool; FP32 K/V: block summaries asked for
/// while that copy is queued, as SpecPV does) and the steps after it; with the ring's
/// copy stream (overlap) and in line (the seed's synchronous way), 2 and 3 slots. Then
/// the bad inputs: ring slots < 2, host memory that cannot be pinned; the model serves
/// after each.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// Runs the check on `m` (its pool must hold prompt_len + steps + 16 tokens) with a
/// random prompt of `prompt_len` tokens. Clears `ok` on any difference or failed check.
nlohmann::json offload_check(CudaTransformer& m, int32_t prompt_len, int32_t steps, uint64_t seed, bool& ok);

/// The cost of a K/V store of another dtype (BF16): the same teacher-forced scenario
/// (prefill chunks, steps, a 5-token window, a rollback and steps after it) on `f32` (FP32
/// K/V) and `other` (the same weights, another kv_dtype), all in the pool: the largest and
/// mean absolute logit difference, the rows whose argmax agree. Clears `ok` when the
/// largest difference is over `tol` times the largest FP32 logit magnitude.
nlohmann::json kv_dtype_error(CudaTransformer& f32, CudaTransformer& other, int32_t prompt_len, int32_t steps,
                              uint64_t seed, double tol, bool& ok);

/// specpipe_gpu_generate --offload-check: offload_check on the model in `target_dir` and on
/// a synthetic shape (synthetic_models.h) with random weights, `prompt_len` prompt tokens,
/// each in a pool sized for it; where opt.kv_dtype is not FP32, kv_dtype_error against an
/// FP32 store of each (tolerance 0.02 of the largest logit magnitude).
nlohmann::json offload_checks(const std::string& target_dir, const std::string& shape, int32_t prompt_len,
                              uint64_t seed, CudaTransformerOptions opt, bool& ok);

}  // namespace specpipe::gpu_tool
