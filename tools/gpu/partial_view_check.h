#pragma once
/// The GPU side of SpecPV (issue 17): partial views in the CUDA forward, its query taps
/// and its block summaries, checked against the CPU backend; and the cost of a partial
/// verify window against the full one on synthetic shapes.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// On the demo target (`target_dir`) after `context` tokens of `prompt` (prefilled on the
/// GPU and on the CPU Transformer), a 5-token verify window:
///   - a view of every block gives the full forward's logits bit for bit;
///   - strict views (sink, per-layer retrieved blocks of per-layer lengths, the recent
///     blocks) give the CPU partial view forward's logits within `logit_tol` (argmax equal
///     but for near-ties under `tie_tol`, at most one), and differ from the full forward;
///   - graphed view forwards equal eager ones bit for bit, for two views of one shape
///     (the graph reads the views at run time);
///   - the query tap sees every layer's 5 rows, near the CPU's;
///   - summarise_key_blocks equals the max / min of the pool's keys read back, bit for bit,
///     and retrieval's top blocks from GPU queries and summaries vs the CPU's (reported);
///   - retrieval on the device (CudaTransformer::device_retrieval: query sums, summaries,
///     scores and top-k on the device) chooses the host way's blocks in every layer;
///   - bad views (layers, lengths, block ids) are refused with one error; the model
///     serves after.
/// Clears `ok` on any failure.
nlohmann::json partial_view_check(const std::string& target_dir, const std::vector<int32_t>& prompt, int32_t context,
                                  double logit_tol, double tie_tol, CudaTransformerOptions opt, bool& ok);

/// Verify-window cost (5 tokens, graphs on, host wall time incl. the sync, median of
/// `iters`) after `context` booked tokens of synthetic shape `shape`: the full window and
/// partial views of each of `budgets` tokens (sink block, spread retrieved blocks, the
/// recent blocks), and the window with attention left out (what a view cannot save).
nlohmann::json view_bench(const std::string& shape, int32_t context, const std::vector<int32_t>& budgets,
                          uint64_t seed, int iters, CudaTransformerOptions opt, bool& ok);

}  // namespace specpipe::gpu_tool
