#pragma once
#include <cstdint>

namespace specpipe::cpu {

/// RMSNorm over rows: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight.
/// x: [rows, ldx] read; weight: [dim] read; y: [rows, ldy] written (may alias x when
/// ldx == ldy). The sum of squares is an 8-lane chain reduced by simd::hsum: a row's
/// result never depends on the other rows. Requires dim % 8 == 0.
void rms_norm(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows,
              int64_t dim, float* y, int64_t ldy);

}  // namespace specpipe::cpu
