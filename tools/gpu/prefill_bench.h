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
///   layerwise  the whole prompt one layer at a time (CudaTransformer::prefill_layerwise):
///            all but the last pool_tokens booked on the host tier, each layer's K/V
///            copied there on the copy stream while the next layer computes;
///   layerwise_sync  the same with those copies in line (the seed's way).
/// Prefill tokens/s of each (host wall time: the chunks after the first, and the whole
/// prompt after a warm-up forward), their ratios, the bytes moved, and whether the last
/// position's logits and every layer's K/V (digests) are the same bits as all-on-GPU.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// pool_tokens 0: a quarter of the context. Throws for a chunk outside [16, 16384].
/// ways: which offloaded ways run besides the all-on-GPU reference, any of "chunked"
/// (offload and seed), "layerwise", "sync" (layerwise_sync), e.g. "chunked,layerwise,sync".
nlohmann::json prefill_bench(const std::string& shape, int32_t context, int32_t chunk, int32_t ring_slots,
                             int32_t pool_tokens, uint64_t seed, CudaTransformerOptions opt, const std::string& ways);

}  // namespace specpipe::gpu_tool
