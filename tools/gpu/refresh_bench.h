#pragma once
/// A SpecPV refresh round on the device, the host way against the device way (issue 17
/// item 2): a tapped verify window and the retrieval that follows it, timed and checked
/// to choose the same blocks.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// Synthetic shape `shape` (random weights) with `context` tokens booked and random FP32
/// keys written into the pool (every layer its own), then a `rows`-token window forward
/// with a query tap and a RetrievalIndex refresh (top `k` blocks per layer after a
/// one-block sink, the recent 8 blocks left out), two ways:
///   - host: the query rows of every layer copied back, summed on the host (QuerySums),
///     the block summaries made on the device and copied back (key_summariser), scored
///     and ranked on the host;
///   - device: the sums left on the device, the summaries kept there per sequence
///     (DeviceRetrieval), scored and ranked there, the chosen blocks copied back.
/// The first refresh (every block summarised) and steady ones (nothing new: the forward
/// and the selection), median of `iters`, beside the same forward untapped. Clears `ok`
/// when the two ways choose different blocks in any layer.
nlohmann::json refresh_bench(const std::string& shape, int32_t context, int32_t rows, int32_t k, uint64_t seed,
                             int iters, CudaTransformerOptions opt, bool& ok);

}  // namespace specpipe::gpu_tool
