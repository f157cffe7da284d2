#pragma once
/// The attention launch paths (internal to kernels/cuda/attention*.cu): attention.cu
/// validates the shape and picks one of them per batch; each enqueues its kernels and
/// returns the launch status. T is the K/V element type: float (FP32) or uint16_t (BF16
/// bits). Every path writes the same bits for a row (attention_device.cuh).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention.h"

namespace specpipe::cuda::attention_detail {

/// The chunk kernels (attention_chunk.cu): a block per (kv head, chunk, row). reference:
/// the first version, records only (the caller merges with launch_combine); else the
/// forward's version, which merges in its last block per (row, kv head) when b.counters
/// is set (else the caller merges with launch_combine).
template <class T>
cudaError_t launch_chunk_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                              bool reference, cudaStream_t stream);

/// Whether a batch takes the window kernel (attention_window.cu), and its launch (the
/// window kernel, then launch_merge).
template <class T>
bool use_window_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b);
template <class T>
cudaError_t launch_window_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                               cudaStream_t stream);

/// Whether a batch takes the split-KV kernel (attention_split.cu: 1..16 rows, head_dim
/// 33..128, SPECPIPE_ATTENTION_SPLIT=1; off by default), and its launch (the split kernel, then
/// launch_head_merge).
template <class T>
bool use_split_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b);
template <class T>
cudaError_t launch_split_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b, uint16_t* outb,
                              cudaStream_t stream);

/// Whether a batch takes the prefill kernel (attention_prefill.cu: every window over 16
/// rows, head_dim 128, attention_prefill_enabled()), and its launch (the prefill
/// kernel, then launch_merge).
template <class T>
bool use_prefill_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b);
template <class T>
cudaError_t launch_prefill_path(const AttentionShape& s, const PagedPool& pool, const AttentionBatch& b,
                                uint16_t* outb, cudaStream_t stream);

/// Second launches over the chunk records (attention_merge.cu), the same bits: the combine
/// kernel (a block per (row, query head)) and the merge kernel (a block per (row, kv head)).
cudaError_t launch_combine(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream);
cudaError_t launch_merge(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream);
/// The split path's: a block per (row, query head) (launch_merge past head_dim 128 or
/// 25,600 chunks).
cudaError_t launch_head_merge(const AttentionShape& s, const AttentionBatch& b, uint16_t* outb, cudaStream_t stream);

}  // namespace specpipe::cuda::attention_detail
