#pragma once
/// The offload benchmark of specpipe_gpu_generate (--offload-bench, issue 16 "Must show"):
/// for a synthetic shape and a context, the decode step (ms/token) with every block in
/// the GPU pool (when it fits), with all but the newest blocks on the pinned host tier
/// streamed through the layer ring (copy stream, overlap), and the same with the copies
/// in line on the compute stream (the seed's synchronous way), in the same run; the PCIe
/// floor (host K/V bytes per step / pinned host-to-device rate measured in the run), the
/// same bytes copied from the tier alone, the overlap efficiency, and the GPU and host
/// memory each needs.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "model/cuda/cuda_transformer.h"

namespace specpipe::gpu_tool {

/// Pinned host-to-device copy rate in bytes per second (1 GiB copies).
double pinned_h2d_bandwidth();

/// pool_tokens: the newest tokens the offloaded runs keep in the GPU pool (the GPU tier),
/// the rest on the host tier; 0: a 2,048-token tail, raised where the host's free memory
/// cannot hold the rest. K/V of opt.kv_dtype.
nlohmann::json offload_bench(const std::string& shape, int32_t context, int32_t ring_slots, int32_t pool_tokens,
                             uint64_t seed, int iters, CudaTransformerOptions opt);

}  // namespace specpipe::gpu_tool
