#include "kernels/cuda/sampling.h"

#include <cfloat>

#include "kernels/cuda/block_reduce.cuh"

namespace specpipe::cuda {
namespace {

constexpr int kThreads = 256;

/// Softmax parameters of one row: p_t = exp(l_t * inv_t - max) / sum.
struct RowSoftmax {
  float inv_t;
  float max;
  double sum;
  __device__ float p(float logit) const { return static_cast<float>(expf(logit * inv_t - max) / sum); }
};

/// Max and sum of one row, every thread gets them. Each thread sums a contiguous segment
/// (fixed order), then the segments are added in thread order.
__device__ RowSoftmax row_softmax(const float* row, int32_t vocab, float inv_t) {
  __shared__ float fscratch[kThreads / 32];
  float mx = -INFINITY;
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) mx = fmaxf(mx, row[t] * inv_t);
  mx = detail::block_max<kThreads>(mx, fscratch);
  const int32_t seg = (vocab + kThreads - 1) / kThreads;
  const int32_t lo = threadIdx.x * seg, hi = min(vocab, lo + seg);
  double s = 0;
  for (int32_t t = lo; t < hi; ++t) s += expf(row[t] * inv_t - mx);
  // Segment sums in thread order: gather them and let every thread add in order.
  __shared__ double segs[kThreads];
  segs[threadIdx.x] = s;
  __syncthreads();
  double total = 0;
  for (int i = 0; i < kThreads; ++i) total += segs[i];
  __syncthreads();
  return {inv_t, mx, total};
}

/// Inverse-CDF draw over weights w(t) (>= 0) computed by `weight`: the first t whose
/// cumulative weight exceeds u * total, skipping zeros; the last positive t if rounding
/// leaves none. Every thread gets the token. Segments as in row_softmax.
template <typename Weight>
__device__ int32_t draw(int32_t vocab, double u, Weight weight) {
  __shared__ double segs[kThreads];
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
  segs[threadIdx.x] = s;
  if (threadIdx.x == 0) {
    found = -1;
    last_positive = -1;
  }
  __syncthreads();
  if (last >= 0) atomicMax(&last_positive, last);
  double before = 0, total = 0;
  for (int i = 0; i < kThreads; ++i) {
    if (i < static_cast<int>(threadIdx.x)) before += segs[i];
    total += segs[i];
  }
  const double target = u * total;
  // The one segment where the cumulative sum crosses the target walks its tokens.
  if (s > 0 && before + s > target && !(before > target)) {
    double cum = before;
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

__global__ void softmax_kernel(const float* logits, int64_t ld, int32_t vocab, float inv_t, float* probs,
                               int64_t ld_probs) {
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, inv_t);
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) probs[blockIdx.x * ld_probs + t] = sm.p(row[t]);
}

__global__ void sample_kernel(const float* logits, int64_t ld, int32_t vocab, float inv_t, const double* u,
                              int32_t* out) {
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, inv_t);
  const int32_t token = draw(vocab, u[blockIdx.x], [&](int32_t t) { return sm.p(row[t]); });
  if (threadIdx.x == 0) out[blockIdx.x] = token;
}

__global__ void chain_sample_kernel(const float* logits, int64_t ld, int32_t vocab, const float* inv_t,
                                    const double* u, float* q, int64_t ld_q, int32_t* ids) {
  const float it = inv_t[blockIdx.x];
  if (!(it > 0.0f)) return;  // a greedy row: its argmax stays
  const float* row = logits + blockIdx.x * ld;
  const RowSoftmax sm = row_softmax(row, vocab, it);
  float* qrow = q + blockIdx.x * ld_q;
  for (int32_t t = threadIdx.x; t < vocab; t += kThreads) qrow[t] = sm.p(row[t]);
  const int32_t token = draw(vocab, u[blockIdx.x], [&](int32_t t) { return sm.p(row[t]); });
  if (threadIdx.x == 0) ids[blockIdx.x] = token;
}

__global__ void rejection_kernel(const float* logits, int64_t ld, const float* q, int64_t ld_q,
                                 const int32_t* draft_ids, const double* u, const RejectionWindow* windows,
                                 int32_t vocab, float inv_t, int32_t* accepted, int32_t* next) {
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
