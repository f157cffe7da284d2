#pragma once
/// Causal attention of a window of new tokens over [committed prefix in the paged pool +
/// the window itself], with grouped-query heads. This one kernel serves prefill chunks,
/// single-token decode and speculative verify windows.
#include <cstdint>
#include <span>

namespace specpipe::cpu {

struct AttentionShape {
  int32_t num_heads;     ///< query heads
  int32_t num_kv_heads;  ///< key/value heads; num_heads % num_kv_heads == 0
  int32_t head_dim;      ///< 16, 32, 64, 128 or 256
  float scale;           ///< usually 1 / sqrt(head_dim)
};

/// The committed prefix of one sequence in one layer: positions [0, dense_length) in a
/// dense segment (the host tier's K/V staged in a layer ring slot,
/// kvstore/layer_ring.h), positions [dense_length, length) in the block pool. Keys are
/// read in position order across the two, so where a key lives never changes a bit of
/// the output. Without a dense segment (dense_length 0) the whole prefix is in the pool.
struct PagedPrefix {
  const float* k;              ///< pool K [slots, kv_heads, head_dim]; read
  const float* v;              ///< pool V, same layout; read
  int64_t slot_stride;         ///< floats per slot (kv_heads * head_dim)
  const int32_t* block_table;  ///< block ids of the sequence; entries below dense_length / block_size are not read
  int32_t block_size;
  int32_t length;              ///< prefix tokens: positions [0, length)
  const float* dense_k = nullptr;  ///< [dense_length, slot_stride]: K of positions [0, dense_length); read
  const float* dense_v = nullptr;  ///< same layout, V; read
  int32_t dense_length = 0;        ///< 0 <= dense_length <= length
};

/// One sequence's window: n tokens at positions [prefix.length, prefix.length + n).
struct AttentionWindow {
  PagedPrefix prefix;
  const float* q;      ///< [n, ld_q]: num_heads * head_dim used, RoPE applied; read
  const float* k;      ///< [n, ld_kv]: the window's own keys (kv_heads * head_dim); read
  const float* v;      ///< [n, ld_kv]: the window's own values; read
  int64_t ld_q, ld_kv;
  int32_t n;
  float* out;          ///< [n, ld_out]: num_heads * head_dim written
  int64_t ld_out;
  /// Optional (SpecPV retrieval by attention mass): [n, kv_heads, prefix blocks] written,
  /// prefix blocks = ceil(prefix.length / block_size): for token i and kv head g, the
  /// softmax probability its group's query heads give to the keys of prefix block b
  /// (positions [b * block_size, (b + 1) * block_size)), summed over those heads. The
  /// window's own keys are in no block. Null: not computed. It changes no bit of `out`.
  float* block_mass = nullptr;
};

/// Runs every window of a batch (parallel over blocks of up to 8 tokens x kv-heads).
///
/// Batch invariant: the output of the token at position p depends only on its query and
/// keys/values [0, p], in that order: scores are 8-lane FMA chains over head_dim, the
/// softmax sum and the value sum run over keys in ascending position, whatever the
/// window size, the batch or the thread count.
void attention(const AttentionShape& shape, std::span<const AttentionWindow> windows);

/// Straightforward reference (double accumulation), for tests.
void attention_reference(const AttentionShape& shape, const AttentionWindow& window);

}  // namespace specpipe::cpu
