#pragma once
/// specpipe_gpu_generate's timings of the demo pair on the GPU (part (d), unless
/// --no-timing): plain and speculative tok/s over all cases at batch 1 (median of
/// `repeat` sweeps; gamma 1..8, the best without the draft chain, where the best spends
/// its time), the target's verify-window cost for n = 1..9 after case 0's prompt, and the
/// draft's decode step alone and inside a greedy chain of 4.
#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// The report's "timing" object.
nlohmann::json golden_timing(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd,
                             const nlohmann::json& cases, int repeat);

/// The draft's decode step and its chains of 4 at batch 1 after case 0's prompt, wall us
/// (medians of 300, each synchronised): a step with the argmax only and with its logits
/// row to the host, a greedy chain, a sampled chain at temperature 0.8 (the draws and q
/// rows on the device, ids and q back).
nlohmann::json draft_chain_timing(CudaTransformer& gd, KvStore& kvd, const nlohmann::json& cases);

}  // namespace specpipe::gpu_tool
