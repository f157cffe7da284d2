#pragma once
/// Check (g) of specpipe_gpu_generate (gpu_generate.cpp's list): copy-on-write of a
/// shared prefix-cache block on the device, through the model's queue_block_copy.
#include <nlohmann/json.hpp>

#include <cstdint>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// (g) Copy-on-write of a shared prefix-cache block on the device: the KV store books the
/// model's pool with the prefix cache on and the model's queue_block_copy as its
/// BlockCopier (as load_pipeline sets it up). For each case, the prompt's first 40 tokens
/// (two full blocks and a part; the pool is sized for one sequence of the longest case):
/// sequence A prefills them; B gets the same prompt (sharing A's full blocks), rolls back
/// into the second shared block (position 20) and re-feeds the rest, so the store must
/// give B a private copy of that block (positions 16..19 from A's, copied on the device)
/// before B writes 20 onwards. Then B and A each decode `steps` greedy tokens: both must
/// equal plain greedy decoding of the same prompt (a store without the prefix cache, run
/// first), which fails if the copy is missing or wrong (B reads stale K/V) or if B wrote
/// into A's block. Clears `ok` on any difference or a case without a copy.
nlohmann::json check_block_copy(CudaTransformer& m, const nlohmann::json& cases, int32_t steps, bool& ok);

}  // namespace specpipe::gpu_tool
