#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/simd.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe::cpu {
namespace {

constexpr int kMaxGroup = 16;  // query heads sharing one kv head

/// Calls fn(key_index, k_row, v_row) for the keys [0, count) a query at window index
/// `i` may see, in position order: the dense segment, the pool prefix block by block,
/// then window rows 0..i.
template <typename Fn>
inline void for_each_key(const AttentionWindow& w, int32_t kv_head, int32_t head_dim, int32_t i,
                         Fn&& fn) {
  const PagedPrefix& p = w.prefix;
  const int64_t head_off = int64_t{kv_head} * head_dim;
  int32_t j = 0;
  for (; j < p.dense_length; ++j) {
    const int64_t o = j * p.slot_stride + head_off;
    fn(j, p.dense_k + o, p.dense_v + o);
  }
  for (int32_t blk = j / p.block_size; j < p.length; ++blk) {
    const int64_t base = int64_t{p.block_table[blk]} * p.block_size;
    for (int32_t off = j % p.block_size; off < p.block_size && j < p.length; ++off, ++j) {
      const int64_t o = (base + off) * p.slot_stride + head_off;
      fn(j, p.k + o, p.v + o);
    }
  }
  for (int32_t t = 0; t <= i; ++t, ++j) fn(j, w.k + t * w.ld_kv + head_off, w.v + t * w.ld_kv + head_off);
}

/// Key j's K and V rows for kv head `kv_head` (j < the query's key count): the same
/// placement as for_each_key, for a row needed ahead of the walk.
inline std::pair<const float*, const float*> key_rows(const AttentionWindow& w, int32_t kv_head, int32_t head_dim,
                                                       int32_t j) {
  const PagedPrefix& p = w.prefix;
  const int64_t head_off = int64_t{kv_head} * head_dim;
  if (j < p.dense_length) {
    const int64_t o = j * p.slot_stride + head_off;
    return {p.dense_k + o, p.dense_v + o};
  }
  if (j < p.length) {
    const int64_t o = (int64_t{p.block_table[j / p.block_size]} * p.block_size + j % p.block_size) * p.slot_stride + head_off;
    return {p.k + o, p.v + o};
  }
  const int64_t o = (j - p.length) * w.ld_kv + head_off;
  return {w.k + o, w.v + o};
}

/// Keys ahead of the score loop whose rows are prefetched. A head's K and V rows are
/// head_dim floats of a slot of every kv head (4 KiB for 8 heads of 128), so each key is
/// a new page and the hardware prefetcher, which stays within a page, fetches none of
/// them: without this a decode step's attention waited on one key's lines after another.
constexpr int32_t kPrefetchKeys = 8;

/// Prefetches key j's K and V rows for one kv head into the caches. Always inlined: as
/// a call of its own GCC finds it free of effects (a prefetch has none it models) and
/// deletes every call.
template <int HD>
[[gnu::always_inline]] inline void prefetch_key(const AttentionWindow& w, int32_t kv_head, int32_t j) {
  const auto [k, v] = key_rows(w, kv_head, HD, j);
  for (int d = 0; d < HD; d += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(k + d), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + d), _MM_HINT_T1);
  }
}

template <int HD>
inline float dot(const float* a, const float* b) {
  __m256 acc = _mm256_setzero_ps();
  for (int d = 0; d < HD; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  return simd::hsum(acc);
}

/// Turns scores[0, len) into exp(s - max) in place and returns their sum; the sum is an
/// 8-lane chain over ascending keys (a partial last chunk adds zeros).
inline float softmax_numerators(float* scores, int32_t len) {
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int32_t j = 0;
  for (; j + 8 <= len; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(scores + j));
  float m = simd::hmax(mx);
  for (int32_t t = j; t < len; ++t) m = std::max(m, scores[t]);
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  for (j = 0; j + 8 <= len; j += 8) {
    __m256 e = simd::exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + j), mv));
    _mm256_storeu_ps(scores + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (j < len) {
    alignas(32) float tail[8];
    for (int32_t t = 0; t < 8; ++t) tail[t] = j + t < len ? scores[j + t] - m : -INFINITY;
    __m256 e = simd::exp8(_mm256_load_ps(tail));
    _mm256_store_ps(tail, e);
    for (int32_t t = 0; j + t < len; ++t) scores[j + t] = tail[t];
    sum = _mm256_add_ps(sum, e);
  }
  return simd::hsum(sum);
}

/// One query token (window index i) against its keys, for the `group` query heads of
/// one kv head. HD is the head dimension as a compile-time constant (see attention()).
template <int HD>
void attend_one(const AttentionShape& s, const AttentionWindow& w, int32_t i, int32_t kv_head,
                std::vector<float>& scratch) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t len = w.prefix.length + i + 1;
  scratch.resize(static_cast<size_t>(group) * static_cast<size_t>(len));
  float* scores = scratch.data();
  const float* q = w.q + i * w.ld_q + int64_t{kv_head} * group * HD;

  // Short windows (decode, verify) read their keys from memory once per query; a
  // prefill chunk's queries share theirs through the caches and skip the prefetches.
  // Prefetching changes no arithmetic.
  const bool prefetch = w.n <= 8;
  if (prefetch)
    for (int32_t j = 0; j < std::min(kPrefetchKeys, len); ++j) prefetch_key<HD>(w, kv_head, j);
  for_each_key(w, kv_head, HD, i, [&](int32_t j, const float* k, const float*) {
    if (prefetch && j + kPrefetchKeys < len) prefetch_key<HD>(w, kv_head, j + kPrefetchKeys);
    for (int32_t h = 0; h < group; ++h) scores[h * len + j] = dot<HD>(q + h * HD, k) * s.scale;
  });
  float inv_sum[kMaxGroup];
  for (int32_t h = 0; h < group; ++h) inv_sum[h] = 1.0f / softmax_numerators(scores + h * len, len);

  float* out = w.out + i * w.ld_out + int64_t{kv_head} * group * HD;
  constexpr int kWidth = HD < 64 ? HD : 64;  // 8 accumulators of 8 lanes at most
  for (int32_t h = 0; h < group; ++h) {
    const float* p = scores + h * len;
    for (int d0 = 0; d0 < HD; d0 += kWidth) {
      __m256 acc[kWidth / 8];
      for (int t = 0; t < kWidth / 8; ++t) acc[t] = _mm256_setzero_ps();
      for_each_key(w, kv_head, HD, i, [&](int32_t j, const float*, const float* v) {
        const __m256 pj = _mm256_set1_ps(p[j]);
        for (int t = 0; t < kWidth / 8; ++t) acc[t] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v + d0 + t * 8), acc[t]);
      });
      const __m256 inv = _mm256_set1_ps(inv_sum[h]);
      for (int t = 0; t < kWidth / 8; ++t)
        _mm256_storeu_ps(out + h * HD + d0 + t * 8, _mm256_mul_ps(acc[t], inv));
    }
  }
}

using AttendFn = void (*)(const AttentionShape&, const AttentionWindow&, int32_t, int32_t,
                          std::vector<float>&);

/// The one place head_dim becomes a template parameter; others are refused.
AttendFn attend_for(int32_t head_dim) {
  switch (head_dim) {
    case 16: return attend_one<16>;
    case 32: return attend_one<32>;
    case 64: return attend_one<64>;
    case 128: return attend_one<128>;
    case 256: return attend_one<256>;
    default: return nullptr;
  }
}

}  // namespace

void attention(const AttentionShape& s, std::span<const AttentionWindow> windows) {
  for (const AttentionWindow& w : windows)
    if (w.prefix.dense_length < 0 || w.prefix.dense_length > w.prefix.length ||
        (w.prefix.dense_length > 0 && (!w.prefix.dense_k || !w.prefix.dense_v)))
      fail(ErrorCode::invalid_argument,
           "attention: a dense segment of {} tokens in a prefix of {} (needs 0 <= dense <= length, and rows)",
           w.prefix.dense_length, w.prefix.length);
  const AttendFn attend = attend_for(s.head_dim);
  if (!attend || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 ||
      s.num_heads / s.num_kv_heads > kMaxGroup)
    fail(ErrorCode::unsupported,
         "attention: heads {}/{} with head_dim {} not supported (head_dim 16, 32, 64, 128 or 256)", s.num_heads,
         s.num_kv_heads, s.head_dim);
  // Work items: (window, token, kv head); longer prefixes first would balance better but
  // the order must not matter for results, and with dynamic scheduling it does not.
  std::vector<int64_t> first;  // first item of each window
  int64_t total = 0;
  for (const AttentionWindow& w : windows) {
    first.push_back(total);
    total += int64_t{w.n} * s.num_kv_heads;
  }
  // Items are claimed one at a time (their costs differ with position); which thread
  // computes an item cannot change its result.
  parallel_for(total, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    for (int64_t item = begin; item < end; ++item) {
      const size_t wi =
          static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin()) - 1;
      const int64_t local = item - first[wi];
      attend(s, windows[wi], static_cast<int32_t>(local / s.num_kv_heads),
             static_cast<int32_t>(local % s.num_kv_heads), scratch);
    }
  });
}

void attention_reference(const AttentionShape& s, const AttentionWindow& w) {
  const int32_t group = s.num_heads / s.num_kv_heads, hd = s.head_dim;
  for (int32_t i = 0; i < w.n; ++i)
    for (int32_t h = 0; h < s.num_heads; ++h) {
      const int32_t g = h / group;
      const float* q = w.q + i * w.ld_q + int64_t{h} * hd;
      std::vector<double> sc;
      std::vector<const float*> vs;
      for_each_key(w, g, hd, i, [&](int32_t, const float* k, const float* v) {
        double d = 0;
        for (int32_t t = 0; t < hd; ++t) d += double{q[t]} * k[t];
        sc.push_back(d * s.scale);
        vs.push_back(v);
      });
      double m = -INFINITY, sum = 0;
      for (double x : sc) m = std::max(m, x);
      for (double& x : sc) sum += (x = std::exp(x - m));
      for (int32_t t = 0; t < hd; ++t) {
        double acc = 0;
        for (size_t j = 0; j < sc.size(); ++j) acc += sc[j] * vs[j][t];
        w.out[i * w.ld_out + int64_t{h} * hd + t] = static_cast<float>(acc / sum);
      }
    }
}

}  // namespace specpipe::cpu
