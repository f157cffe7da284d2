#pragma once
/// Host-side launch plan of cuda::attention (pure C++, no CUDA): which window each query
/// row belongs to, how many split-K chunks each row's keys make, and the workspace the
/// partial results need.
///
/// Split-K is over ABSOLUTE key positions: the keys [0, p] of a query at position p are
/// cut into chunks of kAttentionChunkKeys keys, chunk c holding positions [c*C, c*C + C),
/// whether they sit in the paged pool or in the window's dense K/V. The chunking of a row
/// thus depends on p alone, never on the window size, the batch or where the pool prefix
/// ends: the same token gets the same bits in a verify window and in plain decode.
#include <cstdint>
#include <span>
#include <vector>

#if defined(__CUDACC__)
#define SPECPIPE_HOST_DEVICE __host__ __device__
#else
#define SPECPIPE_HOST_DEVICE
#endif

namespace specpipe::cuda {

/// Keys per split-K chunk (one thread block of the chunk kernel).
constexpr int32_t kAttentionChunkKeys = 128;

/// Split-K chunks of a query that sees `keys` keys (keys >= 1). The kernels call it too.
SPECPIPE_HOST_DEVICE constexpr int32_t attention_chunks(int32_t keys) {
  return (keys + kAttentionChunkKeys - 1) / kAttentionChunkKeys;
}

/// The block table entry of block `ring_block` of a layer ring slot (PagedPool), and back.
/// Negative, so no pool block is mistaken for one.
SPECPIPE_HOST_DEVICE constexpr int32_t ring_table_entry(int32_t ring_block) { return -1 - ring_block; }
SPECPIPE_HOST_DEVICE constexpr int32_t ring_block_of(int32_t entry) { return -1 - entry; }

/// One window as the device reads it (an array of these lives in device memory).
struct AttentionWindowDesc {
  int32_t prefix_len;          ///< keys [0, prefix_len) are in the pool
  int32_t first_token;         ///< row of the window's token 0 in q / k / v / out
  int32_t n;                   ///< tokens in the window: rows [first_token, first_token + n)
  int32_t block_table_offset;  ///< the sequence's block table starts here in the batch's table array
};

/// What a caller knows of one window.
struct AttentionWindowSpec {
  int32_t prefix_len;
  int32_t n;
  int32_t block_table_offset;
};

struct AttentionPlan {
  std::vector<AttentionWindowDesc> windows;  ///< rows laid out window after window
  std::vector<int32_t> token_window;         ///< [total_tokens]: window of each query row
  int32_t total_tokens = 0;
  int32_t max_chunks = 0;                    ///< largest chunk count of any row (grid x)

  /// Floats of the partial-result workspace: per (row, query head, chunk) a running max,
  /// a sum and head_dim accumulators.
  int64_t workspace_floats(int32_t num_heads, int32_t head_dim) const {
    return int64_t{total_tokens} * num_heads * max_chunks * (head_dim + 2);
  }
  /// The fewest rows of any window (AttentionBatch::min_window_rows); 0 without windows.
  int32_t min_window_rows() const {
    int32_t m = 0;
    for (const AttentionWindowDesc& w : windows) m = m == 0 || w.n < m ? w.n : m;
    return m;
  }
  /// Chunk counters of AttentionBatch::counters: one per (row, kv head).
  int64_t counters(int32_t num_kv_heads) const { return int64_t{total_tokens} * num_kv_heads; }
};

/// Lays the windows out in order (window w's rows follow window w-1's). Throws
/// Error(invalid_argument) for n < 1, prefix_len < 0 or a negative table offset.
AttentionPlan plan_attention(std::span<const AttentionWindowSpec> windows);

}  // namespace specpipe::cuda
