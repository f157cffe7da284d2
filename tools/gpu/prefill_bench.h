#pragma once
/// The prefill-with-offload benchmark of specpipe_gpu_generate (--prefill-bench, issue 16
/// "prefill with offload >= 0.9x prefill without"): a synthetic shape prefills a
/// `context`-token prompt chunk by chunk (`chunk` tokens a forward, every layer of a chunk
/// at once, each chunk committed) three ways in one run:
///   gpu      every block in the GPU pool;
///   offload  a pool of `pool_tokens` (plus a chunk): before each chunk the oldest full
///            blocks move to the pinned host tier (reserve_offloading), written back beside
///            the next forward on the ring's copy stream (kvstore/write_back.h), and every
///            chunk streams the host part through the layer ring (copy stream, events);
///   seed     the same with the copies in line on the compute stream (overlap off: the
///            seed's synchronous way, ring loads and write-back both).
/// Prefill tokens/s of each (host wall time, first chunk's warm-up excluded), their ratio,
/// the bytes moved, and whether the last position's logits are the same bits in all three.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// pool_tokens 0: a quarter of the context. Throws for a chunk outside [16, 16384].
nlohmann::json prefill_bench(const std::string& shape, int32_t context, int32_t chunk, int32_t ring_slots,
                             int32_t pool_tokens, uint64_t seed, CudaTransformerOptions opt);

}  // namespace specpipe::gpu_tool
