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

/// Keys ahead of the walk whose rows are prefetched. An item's K and V rows of one key
/// are a stretch of a slot of every kv head (4 KiB for 8 heads of 128), so each key is
/// a new page and the hardware prefetcher, which stays within a page, fetches none of
/// them: without this a decode step's attention waited on one key's lines after another.
constexpr int32_t kPrefetchKeys = 24;
/// Cache lines prefetched at the start of each stretch: the hardware prefetcher follows
/// the rest of it (all of them in software filled the core's miss buffers: a decode
/// step's attention was ~20% slower on the CI VM prefetching 32 lines a key).
constexpr int kPrefetchLines = 2;

/// Prefetches the start of key j's K and V rows for kv heads [kv_head, kv_head + heads)
/// (adjacent in a slot) into the caches. Always inlined: as a call of its own GCC finds
/// it free of effects (a prefetch has none it models) and deletes every call.
template <int HD>
[[gnu::always_inline]] inline void prefetch_key(const AttentionWindow& w, int32_t kv_head, int32_t heads, int32_t j) {
  const auto [k, v] = key_rows(w, kv_head, HD, j);
  for (int d = 0; d < std::min(heads * HD, kPrefetchLines * 16); d += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(k + d), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(v + d), _MM_HINT_T1);
  }
}

/// Tokens of one window per work item: they share one walk over their keys, so a
/// verify window reads each K and V row once, not once per token.
constexpr int32_t kTokenBlock = 8;
/// Keys per block of the walk: the block's K and V rows stay in L1 (8 KiB each at
/// head_dim 128) while every query row of the item uses them.
constexpr int32_t kKeyBlock = 16;

struct KeyBlock {
  int32_t first = 0, count = 0;  // keys [first, first + count)
  const float* k[kKeyBlock];
  const float* v[kKeyBlock];
};

/// Calls fn(block) for the keys that window token `last` sees, in position order and
/// in blocks of up to kKeyBlock: the rows of kv head `kv_head` (the next heads' rows
/// follow them), prefetching the rows of `heads` heads kPrefetchKeys ahead if asked.
template <int HD, typename Fn>
inline void for_each_key_block(const AttentionWindow& w, int32_t kv_head, int32_t heads, int32_t last, bool prefetch,
                               Fn&& fn) {
  const int32_t count = w.prefix.length + last + 1;
  KeyBlock b;
  if (prefetch)
    for (int32_t j = 0; j < std::min(kPrefetchKeys, count); ++j) prefetch_key<HD>(w, kv_head, heads, j);
  for_each_key(w, kv_head, HD, last, [&](int32_t j, const float* k, const float* v) {
    if (prefetch && j + kPrefetchKeys < count) prefetch_key<HD>(w, kv_head, heads, j + kPrefetchKeys);
    b.k[b.count] = k;
    b.v[b.count] = v;
    if (++b.count == kKeyBlock) {
      fn(static_cast<const KeyBlock&>(b));
      b.first += b.count;
      b.count = 0;
    }
  });
  if (b.count > 0) fn(static_cast<const KeyBlock&>(b));
}

/// R query rows against K keys x0.. of a block: score[r][x] = hsum(the FMA chain over d
/// of q_r[d] * k_x[d]) * scale, each (row, key) chain as a lone dot product would run
/// it; R x K chains side by side only hide the FMA latency.
template <int HD, int R, int K>
[[gnu::always_inline]] inline void score_tile(const float* const* q, const float* const* k, int64_t off,
                                              float scale, float* const* scores, int32_t x0) {
  __m256 acc[R][K];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int x = 0; x < K; ++x) acc[r][x] = _mm256_setzero_ps();
  for (int d = 0; d < HD; d += 8) {
    __m256 kv[K];
#pragma GCC unroll 8
    for (int x = 0; x < K; ++x) kv[x] = _mm256_loadu_ps(k[x0 + x] + off + d);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m256 qv = _mm256_loadu_ps(q[r] + d);
#pragma GCC unroll 8
      for (int x = 0; x < K; ++x) acc[r][x] = _mm256_fmadd_ps(qv, kv[x], acc[r][x]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int x = 0; x < K; ++x) scores[r][x0 + x] = simd::hsum(acc[r][x]) * scale;
}

/// Scores of R query rows (of one kv head: the same K rows) for keys [x0, x1) of a
/// block, their K rows `off` floats past the block's; scores[r] points at the block's
/// first key. 1-2 rows take 4 keys a tile, 3 rows 3, more rows 2 (R x K chains side by
/// side, each K vector loaded once for all R rows).
template <int HD, int R>
inline void score_rows(const float* const* q, const KeyBlock& b, int64_t off, int32_t x0, int32_t x1, float scale,
                       float* const* scores) {
  constexpr int K = R <= 2 ? 4 : R == 3 ? 3 : 2;
  int32_t x = x0;
  for (; x + K <= x1; x += K) score_tile<HD, R, K>(q, b.k, off, scale, scores, x);
  for (; x < x1; ++x) score_tile<HD, R, 1>(q, b.k, off, scale, scores, x);
}

/// score_rows where the CPU has AVX-512: a 16-lane vector holds two keys' 8-lane chains
/// (lanes 0-7 key x, 8-15 key x + 1) against the query's 8 floats in both halves, R rows
/// x 2-3 key pairs a tile; each half is summed with the AVX2 tile's tree. Every score is
/// the same FMA chain over head_dim, the same sum and `* scale`: the same bits. Keys left
/// over take the AVX2 tiles.
template <int HD, int R>
[[gnu::target("avx512f")]] void score_rows_avx512(const float* const* q, const KeyBlock& b, int64_t off, int32_t x0,
                                                  int32_t x1, float scale, float* const* scores) {
  constexpr int P = R <= 4 ? 3 : 2;  // key pairs a tile: R x P accumulators + P keys + 1 query <= 32
  int32_t x = x0;
  for (; x + 2 * P <= x1; x += 2 * P) {
    __m512 acc[R][P];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j) acc[r][j] = _mm512_setzero_ps();
    for (int d = 0; d < HD; d += 8) {
      __m512 kv[P];
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j) {
        // (masked forms of the insert and broadcast: GCC 12 warns on the plain forms'
        // undefined sources, as in linear.cpp; the same instructions)
        const __m256d lo = _mm256_castps_pd(_mm256_loadu_ps(b.k[x + 2 * j] + off + d));
        const __m256d hi = _mm256_castps_pd(_mm256_loadu_ps(b.k[x + 2 * j + 1] + off + d));
        kv[j] = _mm512_castpd_ps(_mm512_mask_broadcast_f64x4(_mm512_castpd256_pd512(lo), 0xf0, hi));
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 qv =
            _mm512_castpd_ps(_mm512_maskz_broadcast_f64x4(0xff, _mm256_castps_pd(_mm256_loadu_ps(q[r] + d))));
#pragma GCC unroll 8
        for (int j = 0; j < P; ++j) acc[r][j] = _mm512_fmadd_ps(qv, kv[j], acc[r][j]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int j = 0; j < P; ++j) {
        alignas(64) float halves[16];  // (not a cast or extract: GCC 12 warns on those)
        _mm512_store_ps(halves, acc[r][j]);
        scores[r][x + 2 * j] = simd::hsum(_mm256_load_ps(halves)) * scale;
        scores[r][x + 2 * j + 1] = simd::hsum(_mm256_load_ps(halves + 8)) * scale;
      }
  }
  for (; x < x1; ++x) score_tile<HD, R, 1>(q, b.k, off, scale, scores, x);
}

/// score_rows for n rows; from 3 rows up on AVX-512 where the CPU has it (a decode step's
/// 2 rows are memory-bound and keep the AVX2 tile).
template <int HD>
void score_rows(int32_t n, const float* const* q, const KeyBlock& b, int64_t off, int32_t x0, int32_t x1,
                float scale, float* const* scores) {
  if (n >= 3 && simd::avx512()) {
    switch (n) {
      case 3: return score_rows_avx512<HD, 3>(q, b, off, x0, x1, scale, scores);
      case 4: return score_rows_avx512<HD, 4>(q, b, off, x0, x1, scale, scores);
      case 5: return score_rows_avx512<HD, 5>(q, b, off, x0, x1, scale, scores);
      default: return score_rows_avx512<HD, 6>(q, b, off, x0, x1, scale, scores);
    }
  }
  switch (n) {
    case 1: return score_rows<HD, 1>(q, b, off, x0, x1, scale, scores);
    case 2: return score_rows<HD, 2>(q, b, off, x0, x1, scale, scores);
    case 3: return score_rows<HD, 3>(q, b, off, x0, x1, scale, scores);
    case 4: return score_rows<HD, 4>(q, b, off, x0, x1, scale, scores);
    case 5: return score_rows<HD, 5>(q, b, off, x0, x1, scale, scores);
    default: return score_rows<HD, 6>(q, b, off, x0, x1, scale, scores);
  }
}

/// acc_r[d] = FMA(p_r[x], v_x[d], acc_r[d]) over keys [x0, x1) of a block in order (V
/// rows `off` floats past the block's), R rows at a time so each V vector is loaded
/// once for all of them, in slices of W floats (R x W / 8 accumulators). The
/// accumulators live in memory between calls (stores are exact): each lane stays one
/// chain over its keys in ascending position.
template <int HD, int R, int W>
[[gnu::always_inline]] inline void value_tile(const float* const* p, const KeyBlock& b, int64_t off, int32_t x0,
                                              int32_t x1, float* const* acc) {
  constexpr int V = W / 8;
  for (int d0 = 0; d0 < HD; d0 += W) {
    __m256 a[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) a[r][t] = _mm256_loadu_ps(acc[r] + d0 + t * 8);
    for (int32_t x = x0; x < x1; ++x) {
      const float* vx = b.v[x] + off + d0;
      __m256 vv[V];
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) vv[t] = _mm256_loadu_ps(vx + t * 8);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256 pj = _mm256_broadcast_ss(p[r] + x);
#pragma GCC unroll 8
        for (int t = 0; t < V; ++t) a[r][t] = _mm256_fmadd_ps(pj, vv[t], a[r][t]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) _mm256_storeu_ps(acc[r] + d0 + t * 8, a[r][t]);
  }
}

/// value_tile with 16-lane vectors where the CPU has AVX-512 (simd::avx512()): slices
/// of 32 floats, R x 2 accumulators, half the FMA instructions. Each lane is still one
/// output float's chain over the keys in order: the same bits.
template <int HD, int R>
[[gnu::target("avx512f")]] void value_tile_avx512(const float* const* p, const KeyBlock& b, int64_t off, int32_t x0,
                                                  int32_t x1, float* const* acc) {
  constexpr int W = HD < 32 ? HD : 32, V = W / 16;
  for (int d0 = 0; d0 < HD; d0 += W) {
    __m512 a[R][V];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) a[r][t] = _mm512_loadu_ps(acc[r] + d0 + t * 16);
    for (int32_t x = x0; x < x1; ++x) {
      const float* vx = b.v[x] + off + d0;
      __m512 vv[V];
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) vv[t] = _mm512_loadu_ps(vx + t * 16);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512 pj = _mm512_set1_ps(p[r][x]);
#pragma GCC unroll 8
        for (int t = 0; t < V; ++t) a[r][t] = _mm512_fmadd_ps(pj, vv[t], a[r][t]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int t = 0; t < V; ++t) _mm512_storeu_ps(acc[r] + d0 + t * 16, a[r][t]);
  }
}

/// Rows of one kv head against keys [x0, x1) of a block: up to 6 rows a tile (tokens x
/// heads: a verify window's rows share their V loads), slices of 16 floats from 3 rows
/// up (R x 2 accumulators), of 32 for 1-2 rows (R x 4: enough independent chains); from
/// 3 rows up 16-lane slices of 32 where the CPU has AVX-512 (a decode step's 2 rows are
/// memory-bound and keep the AVX2 tile).
template <int HD>
void value_rows(int32_t n, const float* const* p, const KeyBlock& b, int64_t off, int32_t x0, int32_t x1,
                float* const* acc) {
  constexpr int W = HD < 32 ? HD : 32, N = HD < 16 ? HD : 16;
  if (n >= 3 && simd::avx512()) {
    switch (n) {
      case 3: return value_tile_avx512<HD, 3>(p, b, off, x0, x1, acc);
      case 4: return value_tile_avx512<HD, 4>(p, b, off, x0, x1, acc);
      case 5: return value_tile_avx512<HD, 5>(p, b, off, x0, x1, acc);
      default: return value_tile_avx512<HD, 6>(p, b, off, x0, x1, acc);
    }
  }
  switch (n) {
    case 1: return value_tile<HD, 1, W>(p, b, off, x0, x1, acc);
    case 2: return value_tile<HD, 2, W>(p, b, off, x0, x1, acc);
    case 3: return value_tile<HD, 3, N>(p, b, off, x0, x1, acc);
    case 4: return value_tile<HD, 4, N>(p, b, off, x0, x1, acc);
    case 5: return value_tile<HD, 5, N>(p, b, off, x0, x1, acc);
    default: return value_tile<HD, 6, N>(p, b, off, x0, x1, acc);
  }
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

/// AttentionWindow::block_mass of tokens [i0, i1) and kv heads [g0, g1): per prefix block,
/// the probabilities of its keys summed over each kv head's query heads (scores: the
/// rows' softmax numerators, row r at r * ld, in attend_tokens' row order; inv_sum: each
/// row's inverse sum), in key order.
void block_mass(const AttentionWindow& w, int32_t kv_heads, int32_t group, int32_t i0, int32_t i1, int32_t g0,
                int32_t g1, const float* scores, int64_t ld, const float* inv_sum) {
  const int32_t B = w.prefix.block_size, blocks = (w.prefix.length + B - 1) / B, heads = (g1 - g0) * group;
  for (int32_t t = i0; t < i1; ++t)
    for (int32_t g = g0; g < g1; ++g) {
      float* out = w.block_mass + (int64_t{t} * kv_heads + g) * blocks;
      for (int32_t b = 0; b < blocks; ++b) {
        const int32_t end = std::min(w.prefix.length, (b + 1) * B);
        float m = 0.0f;
        for (int32_t h = 0; h < group; ++h) {
          const int64_t r = int64_t{t - i0} * heads + (g - g0) * group + h;
          float part = 0.0f;
          for (int32_t j = b * B; j < end; ++j) part += scores[r * ld + j];
          m += part * inv_sum[r];
        }
        out[b] = m;
      }
    }
}

/// Window tokens [i0, i1) (at most kTokenBlock) against their keys, for the query heads
/// of kv heads [g0, g1): one walk over the keys for the scores, the softmax of each
/// query row, one walk for the values. The kv heads' rows are adjacent in a slot, so
/// the walk reads (g1 - g0) x head_dim floats of each, not head_dim of a 4 KiB stride.
/// Every output is what its token alone would get: its scores are FMA chains over
/// head_dim, its softmax runs over its own keys and its value sums are chains over its
/// keys in ascending position. HD is the head dimension as a compile-time constant
/// (see attention()).
template <int HD>
void attend_tokens(const AttentionShape& s, const AttentionWindow& w, int32_t i0, int32_t i1, int32_t g0, int32_t g1,
                   std::vector<float>& scratch) {
  const int32_t group = s.num_heads / s.num_kv_heads;
  const int32_t heads = (g1 - g0) * group;  // query heads of the item, in head order
  const int32_t rows = (i1 - i0) * heads;
  const int32_t ld = w.prefix.length + i1;  // scores per row: the last token's keys
  const size_t scores_size = static_cast<size_t>(rows) * static_cast<size_t>(ld);
  scratch.assign(scores_size + static_cast<size_t>(rows) * (HD + 1), 0.0f);
  float* scores = scratch.data();
  float* acc = scores + scores_size;
  float* inv_sum = acc + static_cast<size_t>(rows) * HD;
  auto row = [&](int32_t t, int32_t h) { return static_cast<size_t>((t - i0) * heads + h); };
  auto keys_of = [&](int32_t t) { return w.prefix.length + t + 1; };
  // Calls fn(n, first, off, x0, x1) for the rows of each kv head that see keys of block
  // b, `off` floats past the item's first kv head's: its query heads of every token
  // (token-major) in tiles of up to 6 rows (`first` indexes rows_of), over the keys all of
  // a tile's rows see; a row that sees more of the block (a later window token) goes on
  // alone over the rest. Which rows share a tile changes no arithmetic.
  struct Row {
    int32_t t, h, visible;
  };
  Row rows_of[kTokenBlock * kMaxGroup];
  auto each_tile = [&](const KeyBlock& b, auto&& fn) {
    for (int32_t g = g0; g < g1; ++g) {
      const auto off = static_cast<int64_t>(g - g0) * HD;
      int32_t n = 0;
      for (int32_t t = i0; t < i1; ++t) {
        const int32_t visible = std::min(b.count, keys_of(t) - b.first);
        if (visible <= 0) continue;
        for (int32_t h = (g - g0) * group; h < (g - g0 + 1) * group; ++h) rows_of[n++] = {t, h, visible};
      }
      const int32_t tiles = (n + 5) / 6;
      for (int32_t k = 0, r0 = 0; k < tiles; ++k) {
        const int32_t count = n / tiles + (k < n % tiles ? 1 : 0);
        int32_t common = b.count;
        for (int32_t r = r0; r < r0 + count; ++r) common = std::min(common, rows_of[r].visible);
        fn(count, r0, off, 0, common);
        for (int32_t r = r0; r < r0 + count; ++r)
          if (rows_of[r].visible > common) fn(1, r, off, common, rows_of[r].visible);
        r0 += count;
      }
    }
  };

  // Short windows (decode, verify) read their keys from memory once; a prefill chunk's
  // items share theirs through the caches and skip the prefetches. Prefetching changes
  // no arithmetic.
  const bool prefetch = w.n <= kTokenBlock;
  for_each_key_block<HD>(w, g0, g1 - g0, i1 - 1, prefetch, [&](const KeyBlock& b) {
    each_tile(b, [&](int32_t n, int32_t first, int64_t off, int32_t x0, int32_t x1) {
      const float* q[6];
      float* out[6];
      for (int32_t r = 0; r < n; ++r) {
        const Row& row_r = rows_of[first + r];
        q[r] = w.q + row_r.t * w.ld_q + (int64_t{g0} * group + row_r.h) * HD;
        out[r] = scores + row(row_r.t, row_r.h) * ld + b.first;
      }
      score_rows<HD>(n, q, b, off, x0, x1, s.scale, out);
    });
  });
  for (int32_t t = i0; t < i1; ++t)
    for (int32_t h = 0; h < heads; ++h)
      inv_sum[row(t, h)] = 1.0f / softmax_numerators(scores + row(t, h) * ld, keys_of(t));
  if (w.block_mass) block_mass(w, s.num_kv_heads, group, i0, i1, g0, g1, scores, ld, inv_sum);

  for_each_key_block<HD>(w, g0, g1 - g0, i1 - 1, false, [&](const KeyBlock& b) {
    each_tile(b, [&](int32_t n, int32_t first, int64_t off, int32_t x0, int32_t x1) {
      const float* p[6];
      float* a[6];
      for (int32_t r = 0; r < n; ++r) {
        const Row& row_r = rows_of[first + r];
        p[r] = scores + row(row_r.t, row_r.h) * ld + b.first;
        a[r] = acc + row(row_r.t, row_r.h) * HD;
      }
      value_rows<HD>(n, p, b, off, x0, x1, a);
    });
  });
  for (int32_t t = i0; t < i1; ++t)
    for (int32_t h = 0; h < heads; ++h) {
      const float* a = acc + row(t, h) * HD;
      float* out = w.out + t * w.ld_out + (int64_t{g0} * group + h) * HD;
      const __m256 inv = _mm256_set1_ps(inv_sum[row(t, h)]);
      for (int d = 0; d < HD; d += 8) _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(a + d), inv));
    }
}

using AttendFn = void (*)(const AttentionShape&, const AttentionWindow&, int32_t, int32_t, int32_t, int32_t,
                          std::vector<float>&);

/// The one place head_dim becomes a template parameter; others are refused.
AttendFn attend_for(int32_t head_dim) {
  switch (head_dim) {
    case 16: return attend_tokens<16>;
    case 32: return attend_tokens<32>;
    case 64: return attend_tokens<64>;
    case 128: return attend_tokens<128>;
    case 256: return attend_tokens<256>;
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
  // Work items: (window, block of up to kTokenBlock tokens, kv heads [g, g + per_item));
  // longer prefixes first would balance better but the order must not matter for
  // results, and with dynamic scheduling it does not. An item takes adjacent kv heads,
  // whose rows of a slot are one stretch of memory: a thread's share of a decode step's
  // heads (a longer stretch for the hardware prefetcher: ~10% less time than halves of
  // it on the CI VM).
  const int32_t per_item = std::max(1, s.num_kv_heads / num_threads());
  const int32_t head_items = (s.num_kv_heads + per_item - 1) / per_item;
  std::vector<int64_t> first;  // first item of each window
  int64_t total = 0;
  for (const AttentionWindow& w : windows) {
    first.push_back(total);
    total += int64_t{(w.n + kTokenBlock - 1) / kTokenBlock} * head_items;
  }
  // Items are claimed one at a time (their costs differ with position); which thread
  // computes an item cannot change its result.
  parallel_for(total, 1, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scratch;
    for (int64_t item = begin; item < end; ++item) {
      const size_t wi =
          static_cast<size_t>(std::upper_bound(first.begin(), first.end(), item) - first.begin()) - 1;
      const int64_t local = item - first[wi];
      const auto i0 = static_cast<int32_t>(local / head_items) * kTokenBlock;
      const auto g0 = static_cast<int32_t>(local % head_items) * per_item;
      attend(s, windows[wi], i0, std::min(i0 + kTokenBlock, windows[wi].n), g0, std::min(g0 + per_item, s.num_kv_heads),
             scratch);
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
