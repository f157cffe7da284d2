#pragma once
/// SpecPV over the host tier on the GPU (issue 17 item 5): what a verify window costs
/// when the sequence's older K/V live on the pinned host tier. The full window streams
/// every host block through the layer ring (PCIe); a partial view reads only pool
/// blocks - the newest blocks (the GPU tier) and pool copies of its sink and retrieved
/// host blocks, made once per refresh - so it must stream nothing (the ring's bytes
/// across it are checked to be 0). Also timed: making those copies (one layer's K and V
/// of each view block from the tier), the refresh's only extra PCIe traffic.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// `context` booked tokens of synthetic shape `shape`, all but the newest 2,048 on the
/// pinned host tier (ring of `ring_slots`, copy stream); a 5-token window over the
/// whole context vs over a view of `budget` tokens (budget/16 sink, budget/2 retrieved,
/// the rest recent, as view_bench's). Median of `iters` (host wall time incl. the sync).
/// Clears `ok` when a partial forward streamed any byte.
nlohmann::json host_view_bench(const std::string& shape, int32_t context, int32_t budget, int32_t ring_slots,
                               uint64_t seed, int iters, CudaTransformerOptions opt, bool& ok);

}  // namespace specpipe::gpu_tool
