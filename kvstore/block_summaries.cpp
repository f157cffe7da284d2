#include "kvstore/block_summaries.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace specpipe {

void BlockSummaries::add_layer_block(int32_t layer, const float* keys, int64_t ld) {
  // Row 0 starts both bounds; rows 1.. widen them.
  add_layer_summary(layer, keys, keys);
  const int32_t d = shape_.kv_dim();
  float* bmax = max_[static_cast<size_t>(layer)].data() + static_cast<int64_t>(blocks_) * d;
  float* bmin = min_[static_cast<size_t>(layer)].data() + static_cast<int64_t>(blocks_) * d;
  for (int32_t r = 1; r < shape_.block_size; ++r) {
    const float* row = keys + r * ld;
    for (int32_t i = 0; i < d; ++i) {
      bmax[i] = std::max(bmax[i], row[i]);
      bmin[i] = std::min(bmin[i], row[i]);
    }
  }
}

void BlockSummaries::add_layer_summary(int32_t layer, const float* kmax, const float* kmin) {
  const int32_t d = shape_.kv_dim();
  std::vector<float>& mx = max_.at(static_cast<size_t>(layer));
  std::vector<float>& mn = min_.at(static_cast<size_t>(layer));
  if (mx.size() != static_cast<size_t>(blocks_) * d)
    fail(ErrorCode::invalid_argument, "block summaries: layer {} is not at block {}", layer, blocks_);
  mx.insert(mx.end(), kmax, kmax + d);
  mn.insert(mn.end(), kmin, kmin + d);
}

void BlockSummaries::truncate(int32_t blocks) {
  if (blocks >= blocks_) return;
  blocks_ = std::max(0, blocks);
  const size_t keep = static_cast<size_t>(blocks_) * shape_.kv_dim();
  for (auto& v : max_) v.resize(std::min(v.size(), keep));
  for (auto& v : min_) v.resize(std::min(v.size(), keep));
}

const float* BlockSummaries::kmax(int32_t layer, int32_t block) const {
  return max_.at(static_cast<size_t>(layer)).data() + static_cast<int64_t>(block) * shape_.kv_dim();
}

const float* BlockSummaries::kmin(int32_t layer, int32_t block) const {
  return min_.at(static_cast<size_t>(layer)).data() + static_cast<int64_t>(block) * shape_.kv_dim();
}

QuerySums QuerySums::of(const SummaryShape& shape, const float* q, int32_t n, int64_t ld_q, int32_t num_heads) {
  const int32_t hd = shape.head_dim, d = shape.kv_dim();
  if (num_heads % shape.kv_heads != 0)
    fail(ErrorCode::invalid_argument, "block summaries: {} query heads over {} KV heads", num_heads, shape.kv_heads);
  const int32_t group = num_heads / shape.kv_heads;
  QuerySums s{std::vector<double>(static_cast<size_t>(d), 0.0), std::vector<double>(static_cast<size_t>(d), 0.0)};
  for (int32_t i = 0; i < n; ++i)
    for (int32_t h = 0; h < num_heads; ++h) {
      const float* qh = q + i * ld_q + static_cast<int64_t>(h) * hd;
      const int64_t g = static_cast<int64_t>(h / group) * hd;
      for (int32_t e = 0; e < hd; ++e) {
        (qh[e] > 0 ? s.pos : s.neg)[static_cast<size_t>(g + e)] += qh[e];
      }
    }
  return s;
}

void BlockSummaries::score(int32_t layer, const float* q, int32_t n, int64_t ld_q, int32_t num_heads,
                           std::span<float> scores) const {
  score(layer, QuerySums::of(shape_, q, n, ld_q, num_heads), scores);
}

void BlockSummaries::score(int32_t layer, const QuerySums& sums, std::span<float> scores) const {
  const int32_t d = shape_.kv_dim();
  if (scores.size() < static_cast<size_t>(blocks_))
    fail(ErrorCode::invalid_argument, "block summaries: {} scores for {} blocks", scores.size(), blocks_);
  if (sums.pos.size() != static_cast<size_t>(d) || sums.neg.size() != static_cast<size_t>(d))
    fail(ErrorCode::invalid_argument, "block summaries: query sums of {} values for a KV width of {}", sums.pos.size(), d);
  for (int32_t b = 0; b < blocks_; ++b) {
    const float* bmax = kmax(layer, b);
    const float* bmin = kmin(layer, b);
    double s = 0;
    for (int32_t e = 0; e < d; ++e)
      s += sums.pos[static_cast<size_t>(e)] * bmax[e] + sums.neg[static_cast<size_t>(e)] * bmin[e];
    scores[static_cast<size_t>(b)] = static_cast<float>(s);
  }
}

std::vector<float> block_mass_scores(const float* mass, int32_t n, int32_t kv_heads, int32_t blocks) {
  std::vector<double> sum(static_cast<size_t>(std::max(0, blocks)), 0.0);
  for (int64_t r = 0; r < int64_t{n} * kv_heads; ++r)
    for (int32_t b = 0; b < blocks; ++b) sum[static_cast<size_t>(b)] += mass[r * blocks + b];
  return {sum.begin(), sum.end()};
}

std::vector<int32_t> top_blocks(std::span<const float> scores, int32_t k, int32_t first) {
  std::vector<int32_t> idx;
  for (auto b = static_cast<int32_t>(std::max(0, first)); b < static_cast<int32_t>(scores.size()); ++b) idx.push_back(b);
  const auto keep = static_cast<size_t>(std::clamp<int64_t>(k, 0, static_cast<int64_t>(idx.size())));
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(keep), idx.end(), [&](int32_t a, int32_t b) {
    return scores[static_cast<size_t>(a)] != scores[static_cast<size_t>(b)] ? scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)]
                                                                            : a < b;
  });
  idx.resize(keep);
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace specpipe
