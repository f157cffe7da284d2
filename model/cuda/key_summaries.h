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

/// Quest scores on the device (kvstore/block_summaries.h, QuerySums::of and
/// BlockSummaries::score), for `layers` layers at once, equal bit for bit to the CPU's:
/// the same double sums in the same order, no FMA contraction (--fmad=false), one
/// rounding to float at the end.
///
/// quest_query_sums: pos / neg [layers, kv_dim] device doubles from the n query rows of
/// each layer (q + l * q_layer_stride + i * ld_q; num_heads * head_dim floats, query head
/// h on KV head h / (num_heads / kv_heads)). num_heads must be a multiple of kv_heads.
cudaError_t quest_query_sums(const float* q, int64_t q_layer_stride, int32_t n, int64_t ld_q, int32_t num_heads,
                             int32_t kv_heads, int32_t head_dim, int32_t layers, double* pos, double* neg,
                             cudaStream_t stream);
/// quest_block_scores: scores[l * blocks + b] = (float) sum over e ascending of
/// pos[l, e] * kmax[l, b, e] + neg[l, e] * kmin[l, b, e] (kmax / kmin: [layers, blocks,
/// kv_dim] device floats, layer l at + l * summary_layer_stride). blocks may be 0.
cudaError_t quest_block_scores(const float* kmax, const float* kmin, int64_t summary_layer_stride, int32_t blocks,
                               int32_t kv_dim, int32_t layers, const double* pos, const double* neg, float* scores,
                               cudaStream_t stream);

/// quest_top_blocks: for every layer l, top[l * k + j], j < k = the k blocks of
/// [first, blocks) with the highest scores[l * ld + b], ascending - top_blocks' choice
/// (kvstore/block_summaries.h: a tie goes to the earlier block; -0 ties +0). One thread
/// block per layer (a radix select over the scores' bits). 0 <= k <= blocks - first.
cudaError_t quest_top_blocks(const float* scores, int64_t ld, int32_t first, int32_t blocks, int32_t k, int32_t layers,
                             int32_t* top, cudaStream_t stream);

/// SpecPV retrieval by attention mass (kvstore/block_summaries.h, block_mass_scores; the
/// CPU's cpu::AttentionWindow::block_mass) for one window of a refresh forward, one layer:
/// mass[b] for b < blocks = ceil(prefix_len / block_size) = the softmax probability the
/// window's n rows (q + i * ld_q, RoPE applied, num_heads * head_dim floats) give the keys
/// of prefix block b, summed over rows and query heads, each row's softmax over its
/// prefix and its window keys [0, i] (k_window + i * ld_kv) as the attention's. Keys of
/// FP32 storage: block table entry e >= 0 is pool block e of pool_k, e < 0 block
/// ring_block_of(e) of ring_k (kernels/cuda/attention.h, PagedPool). Three small kernels
/// after the layer's attention, which they do not touch: each block's log-sum-exp per row
/// and head (the block's keys read once), each row and head's log-sum-exp over them, the
/// masses. Deterministic (fixed orders); not the CPU's bits (another summation order).
/// lse: scratch of n * num_heads * (blocks + 1) device floats. table, k_window, q, mass:
/// device.
struct BlockMassArgs {
  const float* q;
  int64_t ld_q;
  const float* k_window;  ///< the window's own keys, row i at + i * ld_kv
  int64_t ld_kv;
  const float* pool_k;
  const float* ring_k;
  int64_t slot_stride;
  int32_t block_size;
  const int32_t* table;   ///< the window's block table (device)
  int32_t prefix_len, n, num_heads, kv_heads, head_dim;
  float scale;
};
cudaError_t attention_block_mass(const BlockMassArgs& a, float* lse, float* mass, cudaStream_t stream);

}  // namespace specpipe::cuda
