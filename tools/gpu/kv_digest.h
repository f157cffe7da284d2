#pragma once
/// A digest per layer of one sequence's K/V at positions [0, n), in position order, read
/// from a CudaTransformer's device pool and, for an offloaded prefix, the KV store's host
/// tier, each element widened to FP32 and hashed by its bits: two runs wrote the same K/V
/// bits exactly when their digests agree (up to a 64-bit hash collision). Lets a bench
/// compare an offloaded prefill with an all-on-GPU one without both models' K/V held at
/// once (prefill_bench.cpp).
#include <cstdint>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// Waits for the model's stream (read_pool). Host-tier blocks are read as the tier holds
/// them (pinned host memory, written by the model's copies).
std::vector<uint64_t> kv_digest(CudaTransformer& m, const KvStore& kv, SeqId seq, int32_t n);

}  // namespace specpipe::gpu_tool
