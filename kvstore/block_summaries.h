#pragma once
/// Quest-style block summaries for SpecPV retrieval (ARCHITECTURE.md section 5, "Partial
/// view"): for every full block of one sequence, per layer and KV head, the element-wise
/// max and min of its keys. A block's score for a query q is the upper bound
/// sum_d max(q_d * Kmax_d, q_d * Kmin_d) on any of its keys' dot products with q; summed
/// over the round's queries and query heads it ranks the blocks worth attending to.
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe {

struct SummaryShape {
  int32_t num_layers;
  int32_t kv_heads;
  int32_t head_dim;
  int32_t block_size;
  int32_t kv_dim() const { return kv_heads * head_dim; }
};

/// The round's queries of one layer reduced for scoring: since Kmax >= Kmin,
/// max(q * Kmax, q * Kmin) = max(q, 0) * Kmax + min(q, 0) * Kmin, so the bound summed over
/// the query rows and the heads of each KV head's group is linear in the sums of their
/// positive and negative parts (kv_dim doubles each, KV head by KV head). Made where the
/// queries are (the verifier's forward); what a retrieval actor needs of them.
struct QuerySums {
  std::vector<double> pos, neg;
  /// Sums of the n query rows of q (num_heads * head_dim floats each, row i at
  /// q + i * ld_q); query head h adds to KV head h / (num_heads / kv_heads). Rows in
  /// order, heads in order within a row: the order every scorer must keep for equal bits.
  static QuerySums of(const SummaryShape& shape, const float* q, int32_t n, int64_t ld_q, int32_t num_heads);
};

class BlockSummaries {
 public:
  explicit BlockSummaries(SummaryShape shape) : shape_(shape), max_(shape.num_layers), min_(shape.num_layers) {}

  const SummaryShape& shape() const { return shape_; }
  /// Full blocks summarised: [0, blocks()).
  int32_t blocks() const { return blocks_; }

  /// Appends block blocks() of `layer` from its keys: `rows` = block_size rows of kv_dim
  /// floats, row r at keys + r * ld. Layers are appended one block at a time: call it for
  /// every layer, then finish_block().
  void add_layer_block(int32_t layer, const float* keys, int64_t ld);
  void finish_block() { ++blocks_; }
  /// The same from a summary made elsewhere (on the device holding the keys): block
  /// blocks() of `layer` is kmax / kmin (kv_dim floats each).
  void add_layer_summary(int32_t layer, const float* kmax, const float* kmin);
  /// Forgets blocks [blocks, blocks()) (their tokens were truncated).
  void truncate(int32_t blocks);

  /// Kmax / Kmin of `block` in `layer`: kv_dim floats, head by head.
  const float* kmax(int32_t layer, int32_t block) const;
  const float* kmin(int32_t layer, int32_t block) const;

  /// scores[b] for b in [0, blocks()): the Quest bound summed over the n query rows of q
  /// (num_heads * head_dim floats each, row i at q + i * ld_q) and their heads; head h
  /// reads KV head h / (num_heads / kv_heads).
  void score(int32_t layer, const float* q, int32_t n, int64_t ld_q, int32_t num_heads, std::span<float> scores) const;
  /// The same from the queries' sums (QuerySums::of): scores[b] = sum over e of
  /// pos[e] * Kmax[e] + neg[e] * Kmin[e] in double, e ascending, rounded to float once.
  void score(int32_t layer, const QuerySums& sums, std::span<float> scores) const;

 private:
  SummaryShape shape_;
  int32_t blocks_ = 0;
  std::vector<std::vector<float>> max_, min_;  // per layer: [blocks, kv_dim]
};

/// SpecPV retrieval by attention mass: one layer's per-block softmax mass of a window's
/// attention (cpu::AttentionWindow::block_mass: [n, kv_heads, blocks], row i and KV head g
/// at (i * kv_heads + g) * blocks) summed over the rows and KV heads, in that order, in
/// double, rounded to float once: a block's score for top_blocks.
std::vector<float> block_mass_scores(const float* mass, int32_t n, int32_t kv_heads, int32_t blocks);

/// The `k` highest-scoring blocks in [first, scores.size()) (fewer if there are fewer),
/// ascending by index; ties go to the earlier block, so the choice is deterministic.
std::vector<int32_t> top_blocks(std::span<const float> scores, int32_t k, int32_t first = 0);

}  // namespace specpipe
