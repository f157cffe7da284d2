#pragma once
/// Dense projections y = x W^T (+ bias), the GEMM/GEMV of every transformer layer.
#include <cstdint>
#include <span>

#include "kernels/cpu/packed_matrix.h"

namespace specpipe::cpu {

/// One weight matrix applied to the shared input of a linear() call.
struct LinearTarget {
  const PackedMatrix* weight;  ///< [n, k]; read
  const float* bias;           ///< [n] or nullptr; read
  float* y;                    ///< [m, ldy]: columns [0, n) written; write
  int64_t ldy;                 ///< row stride of y in floats
  bool accumulate;             ///< y += x W^T (+ bias) instead of y = ... (fuses residual adds)
};

/// For every target t: t.y[i, j] (+)= sum_k x[i, k] * W[j, k] + t.bias[j].
///
/// x: [m, ldx] float32, first k columns used; read. Several targets share one pass over
/// x and one parallel region (q/k/v, gate/up). Every target's k must equal `k`.
///
/// Batch invariant: each output is one float32 FMA chain over k in ascending order,
/// then `+ bias`, then (if accumulate) added to y; the same whatever m, the tile shape,
/// or the thread count. Callers validate shapes; this never throws inside its threads.
void linear(const float* x, int64_t m, int64_t k, int64_t ldx, std::span<const LinearTarget> targets);

/// Naive reference with the same summation order, for tests.
void linear_reference(const float* x, int64_t m, int64_t k, int64_t ldx, const LinearTarget& target);

}  // namespace specpipe::cpu
