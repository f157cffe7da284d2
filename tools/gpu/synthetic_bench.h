#pragma once
/// The synthetic-model benchmark of specpipe_gpu_generate (--synthetic NAME): a model of a
/// real shape (Llama-3-8B, Qwen3-0.6B, ...) with seeded random BF16 weights made on the
/// device; its decode step against the bandwidth floor, verify windows of 1..9 tokens,
/// graphs off and on, and graph vs eager logits bit for bit.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// Device-to-device copy rate in bytes per second, counting bytes read and written.
double copy_bandwidth();

/// Runs the benchmark on the current device after `context` tokens (prefilled through the
/// model up to `prefill_max`, only booked beyond). Returns the report; clears `ok` on a
/// graph / eager difference.
nlohmann::json synthetic_bench(const std::string& name, int32_t context, int32_t prefill_max, uint64_t seed,
                               int iters, CudaTransformerOptions opt, bool& ok);

}  // namespace specpipe::gpu_tool
