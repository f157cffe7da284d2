#pragma once
/// Quest scores on the device (issue 17; model/cuda/key_summaries.h) against the CPU's
/// (kvstore/block_summaries.h), on a synthetic shape's summaries at a context length.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace specpipe::gpu_tool {

/// Random block summaries (Kmin <= Kmax) of `context` tokens in blocks of 16 and `rows`
/// random query rows, every layer of shape `shape`:
///   - the device's query sums and block scores equal QuerySums::of and
///     BlockSummaries::score bit for bit, and so the top blocks (top_blocks) per layer;
///   - times (median of `iters`): the device path (sums and scores of every layer, the
///     scores copied to the host) against the host path it replaces (the query rows of
///     every layer copied to the host, summed and scored there).
/// Clears `ok` on a difference.
nlohmann::json quest_scores_check(const std::string& shape, int32_t context, int32_t rows, uint64_t seed, int iters,
                                  bool& ok);

}  // namespace specpipe::gpu_tool
