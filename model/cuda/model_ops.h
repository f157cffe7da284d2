#pragma once
/// Small element-wise kernels the CUDA forward needs beside kernels/cuda/: bias adds,
/// the residual add of a projection, and a row gather. Device pointers and a stream;
/// each returns the launch status and synchronises nothing. Row-wise, so batch invariant.
#include <cuda_runtime_api.h>

#include <cstdint>

namespace specpipe::cuda {

/// y[r, c] += bias[c] for r < rows, c < cols. y: [rows, ldy]; bias: [cols].
cudaError_t add_bias(float* y, int64_t ldy, const float* bias, int64_t rows, int64_t cols, cudaStream_t stream);

/// x[r, c] = x[r, c] + (t[r, c] + bias[c]) (bias may be null: + t[r, c]), the residual add
/// after o_proj / down_proj; CPU reference: cpu::linear with accumulate (x + (dot + bias)).
/// x: [rows, ld] read and written; t: [rows, ld] read.
cudaError_t residual_add(float* x, const float* t, const float* bias, int64_t rows, int64_t cols, int64_t ld,
                         cudaStream_t stream);

/// dst[i, :] = src[index[i], :] for i < rows, `cols` floats. src: [*, ld]; dst: [rows, ld].
cudaError_t gather_rows(const float* src, const int32_t* index, int64_t rows, int64_t cols, int64_t ld, float* dst,
                        cudaStream_t stream);

/// ids[i] = base[-1 - ids[i]] where ids[i] < 0, for i < n (others unchanged): input ids
/// whose values another stream produced, resolved on the device (the verify forward's
/// drafts: CudaTransformer::place_tokens). base: device memory of this device.
cudaError_t resolve_placed_ids(int32_t* ids, int32_t n, const int32_t* base, cudaStream_t stream);

/// p[i] = BF16 bits of a uniform value in [-scale, scale) drawn from a counter-based hash
/// of (seed, i), rounded to nearest even: the same bits for any launch shape or device.
/// For synthetic models (CudaTransformer::random). n may be 0.
cudaError_t fill_uniform_bf16(uint16_t* p, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace specpipe::cuda
