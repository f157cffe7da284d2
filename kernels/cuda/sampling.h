#pragma once
/// Sampling on the device (issue 6): temperature softmax, inverse-CDF draws and the
/// speculative rejection-sampling verdict, from uniforms the host draws (the request's RNG
/// stays on the host, so a request's stream of draws is the same on every backend).
///
/// Scope: temperature sampling. top-k / top-p need a per-row sort; requests that ask for
/// them use the CPU path (kernels/cpu/sampling.h). Device pointers and a stream; returns
/// the launch status; nothing synchronised. Sums run in double in a fixed order (a
/// segment per thread, the segments by a warp butterfly or scan, then the warps in
/// order), so results are deterministic; they
/// can differ from the CPU's sequential sums in the last bits, which moves a draw only when
/// a uniform lands within rounding of a boundary of the cumulative distribution.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace specpipe::cuda {

/// CPU reference: cpu::sampling_distribution with top_k 0 and top_p 1.
/// probs[r, :vocab] = softmax(logits[r, :vocab] / temperature); temperature > 0.
cudaError_t softmax_temperature(const float* logits, int64_t ld, int32_t rows, int32_t vocab, float temperature,
                                float* probs, int64_t ld_probs, cudaStream_t stream);

/// CPU reference: cpu::sample_from(softmax(logits[r] / temperature), u[r]) for every row:
/// the first token whose cumulative probability exceeds u * total (zero-probability
/// tokens skipped; the last positive one if rounding leaves none).
cudaError_t sample_rows(const float* logits, int64_t ld, int32_t rows, int32_t vocab, float temperature,
                        const double* u, int32_t* out, cudaStream_t stream);

/// A sampled draft chain's step (the model drafter's drafts on the device): for every
/// row r with inv_t[r] > 0, q[r * ld_q + :vocab] = softmax(logits[r] * inv_t[r]) (as
/// softmax_temperature, inv_t = 1 / temperature computed in float, as the CPU does) and
/// ids[r] = the draw with u[r] (as sample_rows); rows with inv_t[r] == 0 are left alone
/// (ids[r] keeps their argmax, q their old contents). inv_t and u are device memory, read
/// when the kernel runs (a graph replay reads the values written before it).
cudaError_t sample_chain_rows(const float* logits, int64_t ld, int32_t rows, int32_t vocab, const float* inv_t,
                              const double* u, float* q, int64_t ld_q, int32_t* ids, cudaStream_t stream);

/// One sequence's verify window for rejection_sample: `drafts` draft tokens, the target's
/// logits rows [p_row, p_row + drafts] (one per draft plus the bonus row), the draft's
/// distributions q rows [q_row, q_row + drafts) (q_row -1: greedy drafts, a point mass on
/// each), drafts at draft_ids[draft_at..], uniforms at u[u_at .. u_at + drafts].
struct RejectionWindow {
  int32_t p_row;
  int32_t q_row;
  int32_t drafts;
  int32_t draft_at;
  int32_t u_at;
};

/// CPU reference: accept_sampling (pipeline/acceptance.h) with top_k 0 and top_p 1, the
/// host RNG's draws given in order: for draft i, accept when u[i] < p(d_i) / q(d_i); at
/// the first rejection (draft k) next = a draw with u[k + 1] from norm(max(0, p - q)) (from
/// p if that is all zero); when every draft is accepted, next = a draw with u[drafts] from
/// the bonus row. The host RNG then advances by accepted + 2 (rejected) or drafts + 1.
/// accepted[w], next[w] written per window.
cudaError_t rejection_sample(const float* logits, int64_t ld, const float* q, int64_t ld_q, const int32_t* draft_ids,
                             const double* u, const RejectionWindow* windows, int32_t count, int32_t vocab,
                             float temperature, int32_t* accepted, int32_t* next, cudaStream_t stream);

}  // namespace specpipe::cuda
