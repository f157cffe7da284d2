#include "model/cuda/key_summaries.h"

#include <cub/block/block_scan.cuh>

#include "kernels/cuda/attention_plan.h"

namespace specpipe::cuda {
namespace {

// One thread block per pool block, threads over the key's kv_dim floats: each reads its
// column of block_size rows (coalesced across threads).
__global__ void key_block_summaries_kernel(const float* pool_k, int64_t slot_stride, int32_t block_size,
                                           int32_t kv_dim, const int32_t* blocks, float* kmax, float* kmin) {
  const int64_t b = blockIdx.x;
  const float* base = pool_k + static_cast<int64_t>(blocks[b]) * block_size * slot_stride;
  for (int32_t i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    float mx = base[i], mn = base[i];
    for (int32_t r = 1; r < block_size; ++r) {
      const float x = base[r * slot_stride + i];
      mx = fmaxf(mx, x);
      mn = fminf(mn, x);
    }
    kmax[b * kv_dim + i] = mx;
    kmin[b * kv_dim + i] = mn;
  }
}

// One thread per (layer, KV element): its sums over the rows, and within a row over the
// query heads of its KV head in order, as QuerySums::of adds them.
__global__ void quest_query_sums_kernel(const float* q, int64_t q_layer_stride, int32_t n, int64_t ld_q, int32_t group,
                                        int32_t head_dim, int32_t kv_dim, double* pos, double* neg) {
  const int32_t i = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= kv_dim) return;
  const int64_t layer = blockIdx.y;
  const int32_t g = i / head_dim, e = i % head_dim;
  const float* ql = q + layer * q_layer_stride;
  double sp = 0, sn = 0;
  for (int32_t r = 0; r < n; ++r)
    for (int32_t j = 0; j < group; ++j) {
      const float v = ql[r * ld_q + static_cast<int64_t>(g * group + j) * head_dim + e];
      if (v > 0) sp += v;
      else sn += v;
    }
  pos[layer * kv_dim + i] = sp;
  neg[layer * kv_dim + i] = sn;
}

// Each warp scores 32 summary blocks of one layer, a lane per block summing its kv_dim
// terms in order (the CPU's order); the warp stages 32 x 32 tiles of Kmax / Kmin in
// shared memory so the loads are coalesced.
constexpr int32_t kScoreTile = 32, kScoreWarps = 4;

__global__ void quest_block_scores_kernel(const float* kmax, const float* kmin, int64_t summary_layer_stride,
                                          int32_t blocks, int32_t kv_dim, const double* pos, const double* neg,
                                          float* scores) {
  __shared__ float tmax[kScoreWarps][kScoreTile][kScoreTile + 1], tmin[kScoreWarps][kScoreTile][kScoreTile + 1];
  const int32_t warp = static_cast<int32_t>(threadIdx.x) / kScoreTile, lane = static_cast<int32_t>(threadIdx.x) % kScoreTile;
  const int64_t layer = blockIdx.y;
  const int32_t first = (static_cast<int32_t>(blockIdx.x) * kScoreWarps + warp) * kScoreTile;
  const float* mx = kmax + layer * summary_layer_stride;
  const float* mn = kmin + layer * summary_layer_stride;
  const double* p = pos + layer * kv_dim;
  const double* m = neg + layer * kv_dim;
  double s = 0;
  for (int32_t e0 = 0; e0 < kv_dim; e0 += kScoreTile) {
    for (int32_t r = 0; r < kScoreTile; ++r) {
      const int64_t b = first + r;
      const int32_t e = e0 + lane;
      const bool in = b < blocks && e < kv_dim;
      tmax[warp][r][lane] = in ? mx[b * kv_dim + e] : 0.0f;
      tmin[warp][r][lane] = in ? mn[b * kv_dim + e] : 0.0f;
    }
    __syncwarp();
    const int32_t width = min(kScoreTile, kv_dim - e0);
    for (int32_t j = 0; j < width; ++j)
      s += p[e0 + j] * tmax[warp][lane][j] + m[e0 + j] * tmin[warp][lane][j];
    __syncwarp();
  }
  if (first + lane < blocks) scores[layer * blocks + first + lane] = static_cast<float>(s);
}

// Top-k by score, one thread block per layer: a radix select finds the k-th largest
// score's key T in four passes of 8 bits (a histogram of the keys that match the bits
// found so far), then one pass in block order keeps every key above T and the first
// `take` keys equal to it - top_blocks' order: higher score first, the earlier block on a
// tie - and writes them ascending.
constexpr int32_t kTopThreads = 512;

// Float order as unsigned order; -0 is +0 first (they tie on the CPU).
__device__ uint32_t score_key(float f) {
  const uint32_t u = __float_as_uint(f == 0.0f ? 0.0f : f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

__global__ void quest_top_blocks_kernel(const float* scores, int64_t ld, int32_t first, int32_t blocks, int32_t k,
                                        int32_t* top) {
  using Scan = cub::BlockScan<int32_t, kTopThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ uint32_t hist[256];
  __shared__ uint32_t found, left;
  const float* s = scores + blockIdx.x * ld;
  int32_t* out = top + static_cast<int64_t>(blockIdx.x) * k;
  const auto tid = static_cast<int32_t>(threadIdx.x);
  uint32_t prefix = 0, mask = 0, remaining = static_cast<uint32_t>(k);
  for (int32_t shift = 24; shift >= 0; shift -= 8) {
    for (int32_t i = tid; i < 256; i += kTopThreads) hist[i] = 0;
    __syncthreads();
    for (int32_t b = first + tid; b < blocks; b += kTopThreads) {
      const uint32_t key = score_key(s[b]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t above = 0;
      int32_t digit = 255;
      for (; digit > 0 && above + hist[digit] < remaining; --digit) above += hist[digit];
      found = prefix | (static_cast<uint32_t>(digit) << shift);
      left = remaining - above;
    }
    __syncthreads();
    prefix = found;
    remaining = left;
    mask |= 255u << shift;
  }
  // prefix is T; `remaining` keys equal to T are taken, the earliest first.
  int32_t equal_before = 0, written = 0;
  for (int32_t base = first; base < blocks; base += kTopThreads) {
    const int32_t b = base + tid;
    const uint32_t key = b < blocks ? score_key(s[b]) : 0u;
    const int32_t equal = b < blocks && key == prefix ? 1 : 0;
    int32_t equal_rank = 0, equal_total = 0, kept_rank = 0, kept_total = 0;
    Scan(scan).ExclusiveSum(equal, equal_rank, equal_total);
    __syncthreads();
    const int32_t keep =
        b < blocks && (key > prefix || (equal != 0 && equal_before + equal_rank < static_cast<int32_t>(remaining))) ? 1 : 0;
    Scan(scan).ExclusiveSum(keep, kept_rank, kept_total);
    __syncthreads();
    if (keep != 0) out[written + kept_rank] = b;
    equal_before += equal_total;
    written += kept_total;
  }
}

}  // namespace

cudaError_t quest_top_blocks(const float* scores, int64_t ld, int32_t first, int32_t blocks, int32_t k, int32_t layers,
                             int32_t* top, cudaStream_t stream) {
  if (layers == 0 || k == 0) return cudaSuccess;
  if (layers < 0 || first < 0 || k < 0 || k > blocks - first) return cudaErrorInvalidValue;
  quest_top_blocks_kernel<<<static_cast<unsigned>(layers), kTopThreads, 0, stream>>>(scores, ld, first, blocks, k, top);
  return cudaGetLastError();
}

cudaError_t quest_query_sums(const float* q, int64_t q_layer_stride, int32_t n, int64_t ld_q, int32_t num_heads,
                             int32_t kv_heads, int32_t head_dim, int32_t layers, double* pos, double* neg,
                             cudaStream_t stream) {
  if (layers == 0) return cudaSuccess;
  if (n < 0 || layers < 0 || kv_heads < 1 || head_dim < 1 || num_heads % kv_heads != 0) return cudaErrorInvalidValue;
  const int32_t kv_dim = kv_heads * head_dim;
  const dim3 grid((kv_dim + 127) / 128, static_cast<unsigned>(layers));
  quest_query_sums_kernel<<<grid, 128, 0, stream>>>(q, q_layer_stride, n, ld_q, num_heads / kv_heads, head_dim, kv_dim,
                                                    pos, neg);
  return cudaGetLastError();
}

cudaError_t quest_block_scores(const float* kmax, const float* kmin, int64_t summary_layer_stride, int32_t blocks,
                               int32_t kv_dim, int32_t layers, const double* pos, const double* neg, float* scores,
                               cudaStream_t stream) {
  if (blocks == 0 || layers == 0) return cudaSuccess;
  if (blocks < 0 || layers < 0 || kv_dim < 1) return cudaErrorInvalidValue;
  const int32_t per = kScoreTile * kScoreWarps;
  const dim3 grid(static_cast<unsigned>((blocks + per - 1) / per), static_cast<unsigned>(layers));
  quest_block_scores_kernel<<<grid, per, 0, stream>>>(kmax, kmin, summary_layer_stride, blocks, kv_dim, pos, neg, scores);
  return cudaGetLastError();
}

cudaError_t key_block_summaries(const float* pool_k, int64_t slot_stride, int32_t block_size, int32_t kv_dim,
                                const int32_t* blocks, int32_t n, float* kmax, float* kmin, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (n < 0 || block_size < 1 || kv_dim < 1) return cudaErrorInvalidValue;
  key_block_summaries_kernel<<<n, 256, 0, stream>>>(pool_k, slot_stride, block_size, kv_dim, blocks, kmax, kmin);
  return cudaGetLastError();
}

namespace {

constexpr int32_t kMassThreads = 128, kMaxMassHeadDim = 256, kMaxMassBlock = 64;

__device__ inline const float* mass_key(const BlockMassArgs& a, int32_t j, int32_t kv_head) {
  const int32_t e = a.table[j / a.block_size];
  const int64_t slot = int64_t{e < 0 ? ring_block_of(e) : e} * a.block_size + j % a.block_size;
  return (e < 0 ? a.ring_k : a.pool_k) + slot * a.slot_stride + int64_t{kv_head} * a.head_dim;
}

// One thread block per (prefix block, KV head): the block's keys staged in shared memory
// once, then a thread per (row, query head of the group): the log-sum-exp of its scaled
// scores over the block's keys -> lse[(i * heads + h) * (blocks + 1) + b].
__global__ void block_lse_kernel(BlockMassArgs a, int32_t blocks, float* lse) {
  extern __shared__ float keys[];  // [block_size][head_dim]
  const int32_t b = static_cast<int32_t>(blockIdx.x), g = static_cast<int32_t>(blockIdx.y);
  const int32_t group = a.num_heads / a.kv_heads;
  const int32_t j0 = b * a.block_size, count = min(a.block_size, a.prefix_len - j0);
  for (int32_t t = static_cast<int32_t>(threadIdx.x); t < count * a.head_dim; t += blockDim.x)
    keys[t] = mass_key(a, j0 + t / a.head_dim, g)[t % a.head_dim];
  __syncthreads();
  for (int32_t t = static_cast<int32_t>(threadIdx.x); t < a.n * group; t += blockDim.x) {
    const int32_t i = t / group, h = g * group + t % group;
    const float* q = a.q + int64_t{i} * a.ld_q + int64_t{h} * a.head_dim;
    float s[kMaxMassBlock];
    float m = -INFINITY;
    for (int32_t r = 0; r < count; ++r) {
      float d = 0.0f;
      for (int32_t e = 0; e < a.head_dim; ++e) d += q[e] * keys[r * a.head_dim + e];
      s[r] = d * a.scale;
      m = fmaxf(m, s[r]);
    }
    float sum = 0.0f;
    for (int32_t r = 0; r < count; ++r) sum += expf(s[r] - m);
    lse[(int64_t{i} * a.num_heads + h) * (blocks + 1) + b] = m + logf(sum);
  }
}

// One thread block per (row, query head): its window keys' log-sum-exp into slot
// `blocks`, then the log-sum-exp over every slot (fixed tree order) into the same slot.
__global__ void row_lse_kernel(BlockMassArgs a, int32_t blocks, float* lse) {
  __shared__ float red[kMassThreads];
  const int32_t i = static_cast<int32_t>(blockIdx.x) / a.num_heads, h = static_cast<int32_t>(blockIdx.x) % a.num_heads;
  const int32_t group = a.num_heads / a.kv_heads;
  float* row = lse + (int64_t{i} * a.num_heads + h) * (blocks + 1);
  const float* q = a.q + int64_t{i} * a.ld_q + int64_t{h} * a.head_dim;
  // The window's keys [0, i]: one thread each (n is a verify window's, small).
  __shared__ float wmax, wsum;
  if (threadIdx.x == 0) {
    float m = -INFINITY, sum = 0.0f;
    for (int32_t t = 0; t <= i; ++t) {
      const float* k = a.k_window + int64_t{t} * a.ld_kv + int64_t{h / group} * a.head_dim;
      float d = 0.0f;
      for (int32_t e = 0; e < a.head_dim; ++e) d += q[e] * k[e];
      d *= a.scale;
      const float nm = fmaxf(m, d);
      sum = sum * expf(m - nm) + expf(d - nm);
      m = nm;
    }
    wmax = m;
    wsum = sum;
  }
  __syncthreads();
  float m = threadIdx.x == 0 ? wmax : -INFINITY;
  for (int32_t b = static_cast<int32_t>(threadIdx.x); b < blocks; b += blockDim.x) m = fmaxf(m, row[b]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (int32_t w = kMassThreads / 2; w > 0; w /= 2) {
    if (static_cast<int32_t>(threadIdx.x) < w) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
    __syncthreads();
  }
  const float top = red[0];
  __syncthreads();
  float sum = threadIdx.x == 0 ? wsum * expf(wmax - top) : 0.0f;
  for (int32_t b = static_cast<int32_t>(threadIdx.x); b < blocks; b += blockDim.x) sum += expf(row[b] - top);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int32_t w = kMassThreads / 2; w > 0; w /= 2) {
    if (static_cast<int32_t>(threadIdx.x) < w) red[threadIdx.x] += red[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) row[blocks] = top + logf(red[0]);
}

// A thread per prefix block: its probability summed over rows and heads, in order.
__global__ void block_mass_kernel(BlockMassArgs a, int32_t blocks, const float* lse, float* mass) {
  const int32_t b = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= blocks) return;
  float sum = 0.0f;
  for (int64_t r = 0; r < int64_t{a.n} * a.num_heads; ++r) sum += expf(lse[r * (blocks + 1) + b] - lse[r * (blocks + 1) + blocks]);
  mass[b] = sum;
}

}  // namespace

cudaError_t attention_block_mass(const BlockMassArgs& a, float* lse, float* mass, cudaStream_t stream) {
  if (a.block_size > kMaxMassBlock || a.head_dim > kMaxMassHeadDim || a.kv_heads <= 0 || a.num_heads % a.kv_heads != 0)
    return cudaErrorInvalidValue;
  const int32_t blocks = (a.prefix_len + a.block_size - 1) / a.block_size;
  if (blocks == 0 || a.n == 0) return cudaSuccess;
  const size_t shared = static_cast<size_t>(a.block_size) * a.head_dim * sizeof(float);
  block_lse_kernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(a.kv_heads)), kMassThreads, shared,
                     stream>>>(a, blocks, lse);
  row_lse_kernel<<<static_cast<unsigned>(a.n * a.num_heads), kMassThreads, 0, stream>>>(a, blocks, lse);
  block_mass_kernel<<<static_cast<unsigned>((blocks + kMassThreads - 1) / kMassThreads), kMassThreads, 0, stream>>>(
      a, blocks, lse, mass);
  return cudaGetLastError();
}

}  // namespace specpipe::cuda
