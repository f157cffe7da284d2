#pragma once
/// Writes of K/V rows into the paged pool of one layer (layout of kvstore/kv_tensors.h:
/// slot s starts at pool + s * slot_stride elements, kv_heads * head_dim of them,
/// token-major inside a block). The pool's elements are `pool_dtype`: f32, or bf16 (each
/// FP32 row element rounded to nearest even, as f32_to_bf16 in core/dtype.h).
///
/// Device pointers and a stream; returns the launch status (cudaErrorInvalidValue for
/// another dtype); nothing synchronised.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace specpipe::cuda {

/// CPU reference: write_rows_to_pool (kvstore/kv_write_sink.h), with the slots already
/// resolved from the block table. For r < rows:
///   pool_k[slots[r] * slot_stride + 0 : row_floats] = k[r * ld : r * ld + row_floats], same for v.
/// k, v: [rows, ld] read; slots: [rows] read; pool_k, pool_v: [num_slots, slot_stride]
/// written (only the slots named).
cudaError_t kv_scatter(const float* k, const float* v, int64_t ld, int64_t row_floats, const int64_t* slots,
                       int32_t rows, void* pool_k, void* pool_v, int64_t slot_stride, DType pool_dtype,
                       cudaStream_t stream);

/// Window commit (CPU reference: the staged commit of the NWOR kv_write strategy, rows
/// [0, accepted) of each window written with write_rows_to_pool). The verdict stays on
/// the device: window w's rows are staged rows [first_row[w], first_row[w] + n[w]) and the
/// first accepted[w] of them (0 <= accepted[w] <= n[w]) go to their slots.
/// staged_k, staged_v: [total_rows, ld] read; slots: [total_rows] (slot of each staged
/// row) read; first_row, n, accepted: [windows] read; max_rows: the largest n[w] (grid
/// size). pool_k, pool_v written at the accepted rows' slots only.
cudaError_t kv_commit_window(const float* staged_k, const float* staged_v, int64_t ld, int64_t row_floats,
                             const int64_t* slots, const int32_t* first_row, const int32_t* n,
                             const int32_t* accepted, int32_t windows, int32_t max_rows, void* pool_k,
                             void* pool_v, int64_t slot_stride, DType pool_dtype, cudaStream_t stream);

}  // namespace specpipe::cuda
