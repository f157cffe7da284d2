#include "kernels/cuda/sampling.h"

#include <cfloat>

#include "kernels/cuda/block_reduce.cuh"

namespace specpipe::cuda {
namespace {

// 1024 threads a row: each row is one block, and its passes are latency-bound (a few
// warps on one SM wait on every load and division); 32 warps hide 4x more of it.
constexpr int kThreads = 1024;

/// Softmax parameters of one row: p_t = exp(l_t * inv_t - max) / sum.
struct RowSoftmax {
  float inv_t;
  float max;
  double sum;
  __device__ float p(float logit) const { return static_cast<float>(expf(logit * inv_t - max) / sum); }
};

/// A thread's share of the prefix sums of the threads' v in thread order: the sum before
/// it, the sum through it, and the total. Fixed order (a warp scan, then the warps in
/// order), and consistent: a thread's `end` is the next thread's `before` bit for bit
/// (the same two operands), and the last thread's `end` is `total`, so exactly one
/// segment can hold a crossing of the cumulative sum.
struct Prefix {
  double before, end, total;
};
__device__ Prefix block_prefix_double(double v) {
  __shared__ double warps[kThreads / 32];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  double incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    const double up = __shfl_up_sync(detail::kFullMask, incl, o);
    if (lane >= o) incl = up + incl;
  }
  double excl = __shfl_up_sync(detail::kFullMask, incl, 1);
  if (lane == 0) excl = 0;
  if (lane == 31) warps[warp] = incl;
  __syncthreads();
  double offset = 0, acc = 0;
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w == warp) offset = acc;
    acc += warps[w];
  }
  __syncthreads();  // warps may be reused at once
  return {lane == 0 ? offset : offset + excl, offset + incl, acc};
}

/// Max and sum of one row, every thread gets them. Each thread sums a contiguous segment
/// (fixed order), then the segments are added in a fixed order (block_prefix_double).
__device__ RowSoftmax row_softmax(const float* row, int32_t vocab, float inv_t) {
  __shared__ float fscratch[kThreads / 32];
  float mx = -INFINITY;
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) mx = fmaxf(mx, row[t] * inv_t);
  mx = detail::block_max<kThreads>(mx, fscratch);
  const int32_t seg = (vocab + kThreads - 1) / kThreads;
  const int32_t lo = threadIdx.x * seg, hi = min(vocab, lo + seg);
  double s = 0;
  for (int32_t t = lo; t < hi; ++t) s += expf(row[t] * inv_t - mx);
  return {inv_t, mx, block_prefix_double(s).total};
}

/// Inverse-CDF draw over weights w(t) (>= 0) computed by `weight`: the first t whose
/// cumulative weight exceeds u * total, skipping zeros; the last positive t if rounding
/// leaves none. Every thread gets the token. Segments as in row_softmax, their prefix
/// sums by block_prefix_double.
template <typename Weight>
__device__ int32_t draw(int32_t vocab, double u, Weight weight) {
  __shared__ int32_t found, last_positive;
  const int32_t seg = (vocab + kThreads - 1) / kThreads;
  const int32_t lo = threadIdx.x * seg, hi = min(vocab, lo + seg);
  double s = 0;
  int32_t last = -1;
  for (int32_t t = lo; t < hi; ++t) {
    const float w = weight(t);
    if (w > 0.0f) {
      s += w;
      last = t;
    }
  }
  if (threadIdx.x == 0) {
    found = -1;
    last_positive = -1;
  }
  const Prefix sums = block_prefix_double(s);  // its syncs order the reset above
  if (last >= 0) atomicMax(&last_positive, last);
  const double target = u * sums.total;
  // The one segment where the cumulative sum crosses the target walks its tokens.
  if (s > 0 && sums.end > target && !(sums.before > target)) {
    double cum = sums.before;
    for (int32_t t = lo; t < hi; ++t) {
      const float w = weight(t);
      if (w <= 0.0f) continue;
      cum += w;
      if (cum > target) {
        found = t;
        break;
      }
    }
  }
  __syncthreads();
  const int32_t token = found >= 0 ? found : last_positive;
  __syncthreads();  // shared state may be reused at once
  return token;
}

__global__ void __launch_bounds__(kThreads)
    softmax_kernel(const float* logits, int64_t ld, int32_t vocab, float inv_t, float* probs, int64_t ld_probs) {
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, inv_t);
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) probs[blockIdx.x * ld_probs + t] = sm.p(row[t]);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, int64_t ld, int32_t vocab, float inv_t, const double* u, int32_t* out) {
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, inv_t);
  const int32_t token = draw(vocab, u[blockIdx.x], [&](int32_t t) { return sm.p(row[t]); });
  if (threadIdx.x == 0) out[blockIdx.x] = token;
}

__global__ void __launch_bounds__(kThreads)
    chain_sample_kernel(const float* logits, int64_t ld, int32_t vocab, const float* inv_t, const double* u, float* q,
                        int64_t ld_q, int32_t* ids) {
  const float it = inv_t[blockIdx.x];
  if (!(it > 0.0f)) return;  // a greedy row: its argmax stays
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, it);
  float* qrow = q + blockIdx.x * ld_q;
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) qrow[t] = sm.p(row[t]);
  __syncthreads();  // the draw reads other threads' q (the same floats sm.p gives)
  const int32_t token = draw(vocab, u[blockIdx.x], [&](int32_t t) { return qrow[t]; });
  if (threadIdx.x == 0) ids[blockIdx.x] = token;
}

__global__ void __launch_bounds__(kThreads)
    rejection_kernel(const float* logits, int64_t ld, const float* q, int64_t ld_q, const int32_t* draft_ids,
                     const double* u, const RejectionWindow* windows, int32_t vocab, float inv_t, int32_t* accepted,
                     int32_t* next) {
  const RejectionWindow w = windows[blockIdx.x];
  for (int32_t i = 0; i < w.drafts; ++i) {
    const float* row = logits + (w.p_row + i) * ld;
    const float* qrow = w.q_row >= 0 ? q + (w.q_row + i) * ld_q : nullptr;
    const RowSoftmax sm = row_softmax(row, vocab, inv_t);
    const int32_t d = draft_ids[w.draft_at + i];
    const double p_d = sm.p(row[d]);
    const double q_d = qrow ? double{qrow[d]} : 1.0;
    if (u[w.u_at + i] < p_d / q_d) continue;
    // Rejected: draw from the residual max(0, p - q) (a point mass q: p without d).
    auto residual = [&](int32_t t) {
      const float p = sm.p(row[t]);
      return qrow ? fmaxf(0.0f, p - qrow[t]) : (t == d ? 0.0f : p);
    };
    int32_t token = draw(vocab, u[w.u_at + i + 1], residual);
    if (token < 0) token = draw(vocab, u[w.u_at + i + 1], [&](int32_t t) { return sm.p(row[t]); });
    if (threadIdx.x == 0) {
      accepted[blockIdx.x] = i;
      next[blockIdx.x] = token;
    }
    return;
  }
  const float* row = logits + (w.p_row + w.drafts) * ld;
  const RowSoftmax sm = row_softmax(row, vocab, inv_t);
  const int32_t token = draw(vocab, u[w.u_at + w.drafts], [&](int32_t t) { return sm.p(row[t]); });
  if (threadIdx.x == 0) {
    accepted[blockIdx.x] = w.drafts;
    next[blockIdx.x] = token;
  }
}

}  // namespace

cudaError_t softmax_temperature(const float* logits, int64_t ld, int32_t rows, int32_t vocab, float temperature,
                                float* probs, int64_t ld_probs, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (!(temperature > 0.0f) || vocab <= 0) return cudaErrorInvalidValue;
  softmax_kernel<<<rows, kThreads, 0, stream>>>(logits, ld, vocab, 1.0f / temperature, probs, ld_probs);
  return detail::launch_status();
}

cudaError_t sample_rows(const float* logits, int64_t ld, int32_t rows, int32_t vocab, float temperature,
                        const double* u, int32_t* out, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (!(temperature > 0.0f) || vocab <= 0) return cudaErrorInvalidValue;
  sample_kernel<<<rows, kThreads, 0, stream>>>(logits, ld, vocab, 1.0f / temperature, u, out);
  return detail::launch_status();
}

cudaError_t sample_chain_rows(const float* logits, int64_t ld, int32_t rows, int32_t vocab, const float* inv_t,
                              const double* u, float* q, int64_t ld_q, int32_t* ids, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (vocab <= 0) return cudaErrorInvalidValue;
  chain_sample_kernel<<<rows, kThreads, 0, stream>>>(logits, ld, vocab, inv_t, u, q, ld_q, ids);
  return detail::launch_status();
}

cudaError_t rejection_sample(const float* logits, int64_t ld, const float* q, int64_t ld_q, const int32_t* draft_ids,
                             const double* u, const RejectionWindow* windows, int32_t count, int32_t vocab,
                             float temperature, int32_t* accepted, int32_t* next, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  if (!(temperature > 0.0f) || vocab <= 0) return cudaErrorInvalidValue;
  rejection_kernel<<<count, kThreads, 0, stream>>>(logits, ld, q, ld_q, draft_ids, u, windows, vocab,
                                                   1.0f / temperature, accepted, next);
  return detail::launch_status();
}

}  // namespace specpipe::cuda
