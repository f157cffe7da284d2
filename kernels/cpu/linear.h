#pragma once
/// Dense projections y = x W^T (+ bias), the GEMM/GEMV of every transformer layer.
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace specpipe::cpu {

/// One weight matrix applied to the shared input of a linear() call.
struct LinearTarget {
  DType dtype;            ///< F32, F16 or BF16 (converted to float32 exactly on load)
  const void* weight;     ///< [n, k] row-major (a torch Linear weight [out, in]); read
  int64_t n;              ///< output features
  const float* bias;      ///< [n] or nullptr; read
  float* y;               ///< [m, ldy]: columns [0, n) written; write
  int64_t ldy;            ///< row stride of y in floats
  bool accumulate;        ///< y += x W^T (+ bias) instead of y = ... (fuses residual adds)
};

/// For every target t: t.y[i, j] (+)= sum_k x[i, k] * t.weight[j, k] + t.bias[j].
///
/// x: [m, ldx] float32, first k columns used; read. Several targets share one pass over
/// x and one parallel region (q/k/v, gate/up).
///
/// Batch invariant: each output is one 8-lane FMA chain over k in ascending order,
/// reduced by simd::hsum, then the bias is added, then (if accumulate) it is added to
/// y; the same for every m, tile shape and thread count. Requires k % 16 == 0.
void linear(const float* x, int64_t m, int64_t k, int64_t ldx, std::span<const LinearTarget> targets);

/// Naive reference with the same summation order, for tests.
void linear_reference(const float* x, int64_t m, int64_t k, int64_t ldx, const LinearTarget& target);

}  // namespace specpipe::cpu
