#include "model/cuda/fused_step.h"

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda/activation.cuh"
#include "kernels/cuda/bf16.cuh"
#include "kernels/cuda/block_reduce.cuh"

namespace specpipe::cuda {
namespace {

namespace cg = cooperative_groups;
using detail::bf16_bits_to_f32;
using detail::f32_to_bf16_rne;
using detail::warp_max;
using detail::widen8;
using detail::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxPer = 4;    // head_dim / 32 values of a head vector per lane (head_dim <= 128)
constexpr int kMaxGroup = 8;  // query heads per kv head
constexpr int kMaxWidth = 4096;
static_assert(kFusedMaxChunks <= 32, "combine_rows gives each chunk a lane");

/// Shared memory: xs, the GEMMs' BF16 input rows, [kFusedMaxRows, ld_s].
__host__ __device__ inline size_t xs_bytes(int ld_s) {
  return (static_cast<size_t>(kFusedMaxRows) * static_cast<size_t>(ld_s) * sizeof(uint16_t) + 15) / 16 * 16;
}

/// This warp's index in grid-wide work loops, block-major: work item i goes to block
/// i % blocks, so a phase with few items (attention chunks of a short context) spreads
/// them over the SMs instead of filling the first blocks' warps. (Measured neutral on an
/// H100 for the demo draft; kept because it cannot hurt a phase with few items.)
__device__ inline int spread_warp() { return (threadIdx.x / 32) * gridDim.x + blockIdx.x; }

struct Dims {
  int H, qd, kvd, qkvd, I, hd, per, group, ld_s;
};

__device__ inline Dims dims_of(const FusedModel& m) {
  Dims d;
  d.H = m.hidden;
  d.qd = m.heads * m.head_dim;
  d.kvd = m.kv_heads * m.head_dim;
  d.qkvd = d.qd + 2 * d.kvd;
  d.I = m.inter;
  d.hd = m.head_dim;
  d.per = m.head_dim / 32;
  d.group = m.heads / m.kv_heads;
  d.ld_s = max(max(d.H, d.qd), d.I);
  return d;
}

/// Keys per attention chunk of a row that sees `keys` keys (a function of the row alone).
__device__ inline int chunk_keys(int keys) {
  const int span = 32 * kFusedMaxChunks;
  return 32 * ((keys + span - 1) / span);
}

/// xs[r, 0:H) = bf16(rms_norm(src row) * weight) for r < rows, one warp per row; the
/// source row is src_index[r] (or r) of `x`, or the embedding of tokens[r] (then block 0
/// also stores the embedded row into x: the residual stream starts there).
__device__ void norm_rows(const FusedModel& m, const Dims& d, float* x, const int32_t* tokens,
                          const int32_t* src_index, int rows, const float* weight, uint16_t* xs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  constexpr int kU = 8;  // loads in flight per lane (the sum still runs i ascending)
  for (int r = warp; r < rows; r += kWarps) {
    const int src = src_index ? src_index[r] : r;
    const uint16_t* emb = tokens ? m.embed + int64_t{tokens[src]} * d.H : nullptr;
    float* xr = x + int64_t{src} * d.H;
    float acc = 0.0f;
    for (int i0 = lane; i0 < d.H; i0 += 32 * kU) {
      float v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = i0 + 32 * u;
        v[u] = i < d.H ? (emb ? bf16_bits_to_f32(emb[i]) : xr[i]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (i0 + 32 * u < d.H) acc = fmaf(v[u], v[u], acc);
    }
    const float mean = warp_sum(acc) / static_cast<float>(d.H);
    const float scale = 1.0f / sqrtf(mean + m.eps);
    for (int i0 = lane; i0 < d.H; i0 += 32 * kU) {
      float v[kU], w[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = i0 + 32 * u;
        v[u] = i < d.H ? (emb ? bf16_bits_to_f32(emb[i]) : xr[i]) : 0.0f;
        w[u] = i < d.H ? weight[i] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int i = i0 + 32 * u;
        if (i >= d.H) break;
        if (emb && blockIdx.x == 0) xr[i] = v[u];
        xs[r * d.ld_s + i] = f32_to_bf16_rne(w[u] * (v[u] * scale));
      }
    }
  }
  __syncthreads();
}

/// y = xs W^T: a warp per output column (k split over lanes 8 at a time,
/// then a butterfly), every row of xs against one read of the column's weights.
/// epi(row, col, value) runs on lane 0. Warp `worker` of `workers` takes columns
/// worker, worker + workers, ... (the grid's warps, or one block's).
/// kC columns per pass (their weight loads in flight together), up to kR rows.
template <int kC, int kR, class Epi>
__device__ void gemm_cols(const uint16_t* w, int n, int k, const uint16_t* xs, int ld_s, int rows, int worker,
                          int workers, Epi epi) {
  const int lane = threadIdx.x % 32;
  const int gwarps = workers;
  for (int col0 = worker; col0 < n; col0 += gwarps * kC) {
    float acc[kC][kR] = {};
    for (int k0 = lane * 8; k0 < k; k0 += 256) {
      float wf[kC][8];
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int col = col0 + c * gwarps;
        if (col < n) widen8(*reinterpret_cast<const uint4*>(w + int64_t{col} * k + k0), wf[c]);
      }
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= rows) break;
        float xf[8];
        widen8(*reinterpret_cast<const uint4*>(xs + r * ld_s + k0), xf);
#pragma unroll
        for (int c = 0; c < kC; ++c)
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[c][r] = fmaf(xf[e], wf[c][e], acc[c][r]);
      }
    }
#pragma unroll
    for (int c = 0; c < kC; ++c) {
      const int col = col0 + c * gwarps;
      if (col >= n) break;
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        if (r >= rows) break;
        const float total = warp_sum(acc[c][r]);
        if (lane == 0) epi(r, col, total);
      }
    }
  }
}

/// QK-norm (when the model has it) and RoPE of one head vector, held kPer-wise by a warp
/// (lane l: elements l + 32 e); rotate-half pairs element i with i + head_dim / 2.
template <int kPer>
__device__ void norm_rope(float (&v)[kPer], const float* norm_weight, const FusedModel& m, int64_t pos) {
  constexpr int kHd = 32 * kPer, kPairs = kPer / 2;
  const int lane = threadIdx.x % 32;
  if (norm_weight) {
    float acc = 0.0f;
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc = fmaf(v[e], v[e], acc);
    const float scale = 1.0f / sqrtf(warp_sum(acc) / static_cast<float>(kHd) + m.eps);
#pragma unroll
    for (int e = 0; e < kPer; ++e) v[e] = norm_weight[lane + 32 * e] * (v[e] * scale);
  }
  const float* c = m.rope_cos + pos * (kHd / 2);
  const float* sn = m.rope_sin + pos * (kHd / 2);
#pragma unroll
  for (int e = 0; e < kPairs; ++e) {
    const int i = lane + 32 * e;
    const float a = v[e], b = v[e + kPairs];
    v[e] = a * c[i] - b * sn[i];
    v[e + kPairs] = b * c[i] + a * sn[i];
  }
}

/// Per (row, head): QK-norm and RoPE (norm_rope) of q and k in place in qkv, and the
/// row's K and V into its pool slot; a warp per head vector over the grid. (A phase of
/// its own: doing it in the qkv GEMM's phase with a block per head was slower on an H100,
/// 17-21K cycles against 9K + 5.5K, since a block's warps then run many columns each.)
template <int kPer>
__device__ void rope_and_store(const FusedModel& m, const Dims& d, const FusedLayer& L, const FusedStep& s,
                               float* qkv, int32_t* table_at) {
  constexpr int kHd = 32 * kPer;
  const int lane = threadIdx.x % 32;
  const int heads_all = m.heads + m.kv_heads;
  const int tasks = s.rows * heads_all;
  for (int t = spread_warp(); t < tasks; t += gridDim.x * kWarps) {
    const int r = t / heads_all, h = t % heads_all;
    if (h == 0 && lane == 0) table_at[r] = s.windows[s.token_window[r]].block_table_offset;
    const bool is_k = h >= m.heads;
    const int j = h - m.heads;
    float* vec = qkv + int64_t{r} * d.qkvd + (is_k ? d.qd + j * kHd : h * kHd);
    float v[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) v[e] = vec[lane + 32 * e];
    norm_rope<kPer>(v, is_k ? L.k_norm : L.q_norm, m, s.positions[r]);
    if (!is_k) {
#pragma unroll
      for (int e = 0; e < kPer; ++e) vec[lane + 32 * e] = v[e];
      continue;
    }
    // K and V go to the pool only: the attention phase reads every key from there.
    const int64_t at = s.slots[r] * d.kvd + j * kHd;
    const float* vsrc = vec + d.kvd;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      L.pool_k[at + lane + 32 * e] = v[e];
      L.pool_v[at + lane + 32 * e] = vsrc[lane + 32 * e];
    }
  }
}

/// Attention partials: per (row, kv head, chunk) a warp scores 32 keys at a time (a key
/// per lane, all query heads of the group), keeps a running max and sum per head, and
/// accumulates the values (a (head, dim) chain per lane over the chunk's keys in order).
/// Every key [0, pos] is in the pool by now (rope_and_store wrote the window's rows).
/// Latency-bound: each lane issues a key row's loads (and then 16 value rows) together.
/// kPer = head_dim / 32.
template <int kPer>
__device__ void attention_partials(const FusedModel& m, const Dims& d, const FusedLayer& L, const FusedStep& s,
                                   const float* qkv, const int32_t* table_at, float* partial) {
  constexpr int kHd = 32 * kPer;
  const int lane = threadIdx.x % 32;
  const int tasks = s.rows * m.kv_heads * kFusedMaxChunks;
  const float scale = 1.0f / sqrtf(static_cast<float>(kHd));
  for (int t = spread_warp(); t < tasks; t += gridDim.x * kWarps) {
    const int r = t / (m.kv_heads * kFusedMaxChunks);
    const int j = (t / kFusedMaxChunks) % m.kv_heads;
    const int c = t % kFusedMaxChunks;
    const int keys = s.positions[r] + 1;
    const int ck = chunk_keys(keys);
    const int k_begin = c * ck;
    if (k_begin >= keys) continue;
    const int k_end = min(k_begin + ck, keys);
    const int32_t* table = s.block_tables + table_at[r];
    const float* q0 = qkv + int64_t{r} * d.qkvd + j * d.group * kHd;
    float mrun[kMaxGroup], lrun[kMaxGroup], acc[kMaxGroup][kPer];
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      mrun[g] = -INFINITY;
      lrun[g] = 0.0f;
#pragma unroll
      for (int e = 0; e < kPer; ++e) acc[g][e] = 0.0f;
    }
    for (int base = k_begin; base < k_end; base += 32) {
      const int kp = base + lane;
      const bool valid = kp < k_end;
      const int64_t slot = valid ? int64_t{table[kp / m.block_size]} * m.block_size + kp % m.block_size : 0;
      const float* kr = L.pool_k + slot * d.kvd + j * kHd;
      float sc[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) sc[g] = 0.0f;
#pragma unroll
      for (int i0 = 0; i0 < kHd; i0 += 32) {
        float4 kb[8];
#pragma unroll
        for (int u = 0; u < 8; ++u)
          kb[u] = valid ? *reinterpret_cast<const float4*>(kr + i0 + 4 * u) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int g = 0; g < kMaxGroup; ++g) {
          if (g >= d.group) break;
#pragma unroll
          for (int u = 0; u < 8; ++u) {
            const float4 q4 = *reinterpret_cast<const float4*>(q0 + g * kHd + i0 + 4 * u);
            sc[g] = fmaf(q4.x, kb[u].x, sc[g]);
            sc[g] = fmaf(q4.y, kb[u].y, sc[g]);
            sc[g] = fmaf(q4.z, kb[u].z, sc[g]);
            sc[g] = fmaf(q4.w, kb[u].w, sc[g]);
          }
        }
      }
      float p[kMaxGroup];
#pragma unroll
      for (int g = 0; g < kMaxGroup; ++g) {
        if (g >= d.group) break;
        const float score = valid ? sc[g] * scale : -INFINITY;
        const float mnew = fmaxf(mrun[g], warp_max(score));
        const float corr = expf(mrun[g] - mnew);  // 0 on the first pass (mrun = -inf)
        p[g] = valid ? expf(score - mnew) : 0.0f;
        lrun[g] = lrun[g] * corr + warp_sum(p[g]);
#pragma unroll
        for (int e = 0; e < kPer; ++e) acc[g][e] *= corr;
        mrun[g] = mnew;
      }
      // Values: 64 / kPer keys' rows loaded together, then their FMAs in key order.
      const int n_keys = min(32, k_end - base);
      constexpr int kU = 64 / kPer;
      for (int k0 = 0; k0 < n_keys; k0 += kU) {
        float vv[kU][kPer];
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          const int64_t vs = __shfl_sync(detail::kFullMask, slot, (k0 + u) & 31);
          const float* vr = L.pool_v + vs * d.kvd + j * kHd;
#pragma unroll
          for (int e = 0; e < kPer; ++e) vv[u][e] = k0 + u < n_keys ? vr[lane + 32 * e] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kU; ++u) {
          if (k0 + u >= n_keys) break;
#pragma unroll
          for (int g = 0; g < kMaxGroup; ++g) {
            if (g >= d.group) break;
            const float pk = __shfl_sync(detail::kFullMask, p[g], k0 + u);
#pragma unroll
            for (int e = 0; e < kPer; ++e) acc[g][e] = fmaf(pk, vv[u][e], acc[g][e]);
          }
        }
      }
    }
    const int stride = kHd + 2;
#pragma unroll
    for (int g = 0; g < kMaxGroup; ++g) {
      if (g >= d.group) break;
      const int h = j * d.group + g;
      float* out = partial + ((int64_t{r} * m.heads + h) * kFusedMaxChunks + c) * stride;
      if (lane == 0) {
        out[0] = mrun[g];
        out[1] = lrun[g];
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) out[2 + lane + 32 * e] = acc[g][e];
    }
  }
}

/// xs[r, h * head_dim + i] = bf16 of the merged chunks of (row r, head h): every block
/// merges all rows (chunks in ascending order), a warp per (row, head).
__device__ void combine_rows(const FusedModel& m, const Dims& d, const FusedStep& s, const float* partial,
                             uint16_t* xs) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int stride = d.hd + 2;
  for (int t = warp; t < s.rows * m.heads; t += kWarps) {
    const int r = t / m.heads, h = t % m.heads;
    const int keys = s.positions[r] + 1;
    const int ck = chunk_keys(keys);
    const int chunks = (keys + ck - 1) / ck;
    const float* pb = partial + (int64_t{r} * m.heads + h) * kFusedMaxChunks * stride;
    // A lane per chunk (chunks <= 32) for the max and the sum; the value sums add the
    // chunks in ascending order, 8 chunks' loads in flight.
    const float mc = lane < chunks ? pb[lane * stride] : -INFINITY;
    const float mx = warp_max(mc);
    const float wc = lane < chunks ? expf(mc - mx) : 0.0f;
    const float l = warp_sum(lane < chunks ? pb[lane * stride + 1] * wc : 0.0f);
    float o[kMaxPer] = {};
    constexpr int kU = 8;
    for (int c0 = 0; c0 < chunks; c0 += kU) {
      float a[kU][kMaxPer];
#pragma unroll
      for (int u = 0; u < kU; ++u)
#pragma unroll
        for (int e = 0; e < kMaxPer; ++e)
          if (e < d.per && c0 + u < chunks) a[u][e] = pb[(c0 + u) * stride + 2 + lane + 32 * e];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const float w = __shfl_sync(detail::kFullMask, wc, (c0 + u) & 31);
        if (c0 + u >= chunks) break;
#pragma unroll
        for (int e = 0; e < kMaxPer; ++e)
          if (e < d.per) o[e] = fmaf(a[u][e], w, o[e]);
      }
    }
#pragma unroll
    for (int e = 0; e < kMaxPer; ++e)
      if (e < d.per) xs[r * d.ld_s + h * d.hd + lane + 32 * e] = f32_to_bf16_rne(o[e] / l);
  }
  __syncthreads();
}

__global__ void __launch_bounds__(kThreads, 1)
    fused_step_kernel(const FusedModel m, const FusedStep s, const FusedScratch sc) {
  extern __shared__ __align__(16) unsigned char smem[];
  auto* xs = reinterpret_cast<uint16_t*>(smem);
  const int gw = spread_warp(), gws = gridDim.x * kWarps;
  __shared__ float best_v[kWarps][kFusedMaxRows];
  __shared__ int best_i[kWarps][kFusedMaxRows];
  cg::grid_group grid = cg::this_grid();
  long long* trace = blockIdx.x == 0 && threadIdx.x == 0 ? sc.trace : nullptr;
  int mark = 0;
  auto sync = [&] {
    grid.sync();
    if (trace && mark < kFusedTraceSlots - 1) trace[++mark] = clock64();
  };
  if (trace) trace[0] = clock64();
  const Dims d = dims_of(m);
  const int rows = s.rows;
  float* x = sc.x;
  float* qkv = sc.qkv;
  float* gu = sc.gate_up;

  for (int l = 0; l < m.layers; ++l) {
    const FusedLayer& L = m.layer[l];
    // input norm (layer 0: of the embedded tokens) + qkv projection
    norm_rows(m, d, x, l == 0 ? s.tokens : nullptr, nullptr, rows, L.input_norm, xs);
    gemm_cols<2, kFusedMaxRows>(L.qkv, d.qkvd, d.H, xs, d.ld_s, rows, gw, gws,
                                [&](int r, int col, float v) { qkv[int64_t{r} * d.qkvd + col] = v; });
    sync();
    if (d.per == 2) rope_and_store<2>(m, d, L, s, qkv, sc.table_at);
    else rope_and_store<4>(m, d, L, s, qkv, sc.table_at);
    sync();
    if (d.per == 2) attention_partials<2>(m, d, L, s, qkv, sc.table_at, sc.partial);
    else attention_partials<4>(m, d, L, s, qkv, sc.table_at, sc.partial);
    sync();
    combine_rows(m, d, s, sc.partial, xs);
    gemm_cols<2, kFusedMaxRows>(L.o, d.H, d.qd, xs, d.ld_s, rows, gw, gws,
              [&](int r, int col, float v) { x[int64_t{r} * d.H + col] = x[int64_t{r} * d.H + col] + v; });
    sync();
    norm_rows(m, d, x, nullptr, nullptr, rows, L.post_norm, xs);
    gemm_cols<2, kFusedMaxRows>(L.gate_up, 2 * d.I, d.H, xs, d.ld_s, rows, gw, gws,
              [&](int r, int col, float v) { gu[int64_t{r} * 2 * d.I + col] = v; });
    sync();
#pragma unroll 4
    for (int t = threadIdx.x; t < rows * d.I; t += kThreads) {
      const int r = t / d.I, i = t % d.I;
      xs[r * d.ld_s + i] =
          f32_to_bf16_rne(detail::silu_gate_value(gu[int64_t{r} * 2 * d.I + i], gu[int64_t{r} * 2 * d.I + d.I + i]));
    }
    __syncthreads();
    gemm_cols<2, kFusedMaxRows>(L.down, d.H, d.I, xs, d.ld_s, rows, gw, gws,
              [&](int r, int col, float v) { x[int64_t{r} * d.H + col] = x[int64_t{r} * d.H + col] + v; });
    sync();
  }

  // final norm of the rows that want logits, LM head, argmax (lowest index wins ties)
  const int lr = s.logit_rows;
  if (lr == 0) {  // a prefill chunk that wants no logits (uniform: every block leaves)
    if (trace && mark < kFusedTraceSlots - 1) trace[++mark] = clock64();
    return;
  }
  norm_rows(m, d, x, m.layers == 0 ? s.tokens : nullptr, s.logit_index, lr, m.final_norm, xs);
  float bv[kFusedMaxRows];
  int bi[kFusedMaxRows];
#pragma unroll
  for (int r = 0; r < kFusedMaxRows; ++r) {
    bv[r] = -INFINITY;
    bi[r] = 0x7fffffff;
  }
  // Columns rise along a warp's loop, so a strict > keeps the lowest index of a tie.
  auto head_epi = [&](int r, int col, float v) {
    if (s.logits) s.logits[int64_t{r} * m.vocab + col] = v;
#pragma unroll
    for (int rr = 0; rr < kFusedMaxRows; ++rr)
      if (rr == r && (v > bv[rr] || bi[rr] == 0x7fffffff)) {
        bv[rr] = v;
        bi[rr] = col;
      }
  };
  // The widest GEMM: decode and chain steps (a row or few) keep 8 columns in flight.
  if (lr <= 4) gemm_cols<8, 4>(m.lm_head, m.vocab, d.H, xs, d.ld_s, lr, gw, gws, head_epi);
  else gemm_cols<2, kFusedMaxRows>(m.lm_head, m.vocab, d.H, xs, d.ld_s, lr, gw, gws, head_epi);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < kFusedMaxRows; ++r) {
      best_v[warp][r] = bv[r];
      best_i[warp][r] = bi[r];
    }
  }
  __syncthreads();
  auto better = [](float v, int i, float bv0, int bi0) { return v > bv0 || (v == bv0 && i < bi0) || bi0 == 0x7fffffff; };
  if (threadIdx.x < lr) {
    const int r = threadIdx.x;
    float v0 = best_v[0][r];
    int i0 = best_i[0][r];
    for (int w = 1; w < kWarps; ++w)
      if (best_i[w][r] != 0x7fffffff && better(best_v[w][r], best_i[w][r], v0, i0)) {
        v0 = best_v[w][r];
        i0 = best_i[w][r];
      }
    float* out = sc.best + (int64_t{blockIdx.x} * kFusedMaxRows + r) * 2;
    out[0] = v0;
    out[1] = __int_as_float(i0);
  }
  sync();
  // Block 0: a warp per row, a lane per block's candidate, then a butterfly of (value,
  // index) pairs; the lowest index wins a tie whatever the order.
  if (blockIdx.x == 0) {
    for (int r = warp; r < lr; r += kWarps) {
      float v0 = -INFINITY;
      int i0 = 0x7fffffff;
      for (unsigned b = lane; b < gridDim.x; b += 32) {
        const float* in = sc.best + (int64_t{b} * kFusedMaxRows + r) * 2;
        const int i = __float_as_int(in[1]);
        if (i != 0x7fffffff && better(in[0], i, v0, i0)) {
          v0 = in[0];
          i0 = i;
        }
      }
      for (int o = 16; o > 0; o >>= 1) {
        const float v1 = __shfl_xor_sync(detail::kFullMask, v0, o);
        const int i1 = __shfl_xor_sync(detail::kFullMask, i0, o);
        if (i1 != 0x7fffffff && better(v1, i1, v0, i0)) {
          v0 = v1;
          i0 = i1;
        }
      }
      if (lane == 0) s.argmax[r] = i0;
    }
  }
  if (trace && mark < kFusedTraceSlots - 1) trace[++mark] = clock64();
}

size_t smem_bytes(const FusedModel& m) {
  const int ld = std::max({m.hidden, m.heads * m.head_dim, m.inter});
  return xs_bytes(ld);
}

}  // namespace

const char* fused_step_unsupported(const FusedModel& m, bool has_biases) {
  if (has_biases) return "projection biases are not served by the fused step";
  if (m.head_dim % 64 != 0 || m.head_dim > 32 * kMaxPer) return "head_dim must be 64 or 128";
  if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0 || m.heads / m.kv_heads > kMaxGroup)
    return "a GQA group of more than 8 query heads";
  const int qd = m.heads * m.head_dim;
  for (int w : {m.hidden, qd, m.inter})
    if (w % 8 != 0 || w > kMaxWidth) return "hidden, q_dim and intermediate must be multiples of 8 up to 4096";
  return nullptr;
}

namespace {

/// Where each part of FusedScratch starts, in floats from the base, and the total: one
/// layout for sizing and carving. Every part starts 16-byte aligned (float4 reads of q).
struct ScratchLayout {
  int64_t x, qkv, gate_up, partial, table_at, best, total;
};

ScratchLayout scratch_layout(const FusedModel& m, int32_t blocks) {
  const int64_t R = kFusedMaxRows;
  const int64_t qkvd = int64_t{m.heads + 2 * m.kv_heads} * m.head_dim;
  int64_t at = 0;
  auto take = [&](int64_t floats) {
    const int64_t start = at;
    at += (floats + 3) / 4 * 4;
    return start;
  };
  ScratchLayout l{};
  l.x = take(R * m.hidden);
  l.qkv = take(R * qkvd);
  l.gate_up = take(R * 2 * m.inter);
  l.partial = take(R * m.heads * kFusedMaxChunks * (m.head_dim + 2));
  l.table_at = take(R);  // int32 values in float slots
  l.best = take(int64_t{blocks} * R * 2);
  l.total = at;
  return l;
}

}  // namespace

int64_t fused_scratch_floats(const FusedModel& m, int32_t blocks) { return scratch_layout(m, blocks).total; }

FusedScratch fused_scratch_carve(const FusedModel& m, float* base) {
  const ScratchLayout l = scratch_layout(m, 0);  // best is last: its size does not move the rest
  FusedScratch s;
  s.x = base + l.x;
  s.qkv = base + l.qkv;
  s.gate_up = base + l.gate_up;
  s.partial = base + l.partial;
  s.table_at = reinterpret_cast<int32_t*>(base + l.table_at);
  s.best = base + l.best;
  return s;
}

cudaError_t fused_step_blocks(const FusedModel& m, int32_t device, int32_t wanted, int32_t* blocks) {
  *blocks = 0;
  const size_t smem = smem_bytes(m);
  cudaError_t e = cudaFuncSetAttribute(fused_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  int per_sm = 0, sms = 0, coop = 0;
  if ((e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fused_step_kernel, kThreads, smem)) != cudaSuccess)
    return e;
  if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) return e;
  if ((e = cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, device)) != cudaSuccess) return e;
  if (per_sm < 1 || coop == 0) return cudaSuccess;
  *blocks = wanted > 0 ? std::min(wanted, sms) : sms;
  return cudaSuccess;
}

cudaError_t fused_step(const FusedModel& m, const FusedStep& step, const FusedScratch& scratch, int32_t blocks,
                       cudaStream_t stream) {
  if (step.rows < 1 || step.rows > kFusedMaxRows || step.logit_rows < 0 || step.logit_rows > step.rows ||
      blocks < 1)
    return cudaErrorInvalidValue;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem_bytes(m);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, fused_step_kernel, m, step, scratch);
}

}  // namespace specpipe::cuda
