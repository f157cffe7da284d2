#pragma once
/// SpecPV block summaries where the K/V live (kvstore/block_summaries.h): the
/// element-wise max and min of each listed full pool block's keys, per KV head and
/// dimension, computed on the device so that only the summaries (1 / block_size of the
/// keys' bytes) cross to the host. model/cuda/ internal.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace specpipe::cuda {

/// For b < n: kmax[b, i] / kmin[b, i] = max / min over the block_size rows r of pool block
/// blocks[b] of pool_k[(blocks[b] * block_size + r) * slot_stride + i], i < kv_dim: the
/// same floats as the CPU's std::max / std::min (exact, order-free). blocks: [n] device;
/// kmax, kmin: [n, kv_dim] device. n may be 0.
cudaError_t key_block_summaries(const float* pool_k, int64_t slot_stride, int32_t block_size, int32_t kv_dim,
                                const int32_t* blocks, int32_t n, float* kmax, float* kmin, cudaStream_t stream);

}  // namespace specpipe::cuda
