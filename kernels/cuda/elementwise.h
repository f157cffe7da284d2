#pragma once
/// Row-wise CUDA kernels of the transformer layer: embedding gather, RMSNorm (and per-head
/// QK-norm), RoPE, SiLU gate, BF16 conversion of activations, argmax.
///
/// Every function takes device pointers and a stream, enqueues its work and returns the
/// launch status (cudaSuccess, or the error cudaGetLastError() reported). Nothing is
/// synchronised and nothing is validated beyond what a launch needs: callers check shapes
/// (see kernels/README.md). Batch invariant: one block owns one row (one head of a row for
/// the norms), and its reduction order depends only on the row's length.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace specpipe::cuda {

/// CPU reference: cpu::embedding. out[i, :] = table[tokens[i], :] as float32.
/// table: [vocab, dim] in `dtype` (f32, f16 or bf16); read. tokens: [n] ids, each in
/// [0, vocab) (the caller checks: the ids come from the host); read. out: [n, ld_out]
/// float32, columns [0, dim) written.
cudaError_t embedding(DType dtype, const void* table, int64_t dim, const int32_t* tokens, int32_t n,
                      float* out, int64_t ld_out, cudaStream_t stream);

/// CPU reference: cpu::rms_norm. For each row r and head h < heads:
///   y[r, h*dim : (h+1)*dim] = x[...] / sqrt(mean(x[...]^2) + eps) * weight
/// heads = 1 is the layer norm over `dim` features; heads > 1 is the per-head QK-norm of
/// Qwen3 (weight shared by the heads). x: [rows, ldx] read; weight: [dim] read;
/// y: [rows, ldy] written (may alias x when ldx == ldy).
cudaError_t rms_norm(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows,
                     int32_t heads, int64_t dim, float* y, int64_t ldy, cudaStream_t stream);

/// CPU reference: cpu::apply_rope. Rotates the first `heads` head vectors of each row
/// in place, row r at position positions[r], rotate-half convention.
/// cos, sin: [max_positions, head_dim / 2], the cpu::RopeTable's arrays uploaded as they
/// are (same angles, bit for bit); read. positions: [rows], each < max_positions; read.
/// x: [rows, ldx], heads * head_dim floats used; read and written.
cudaError_t rope(const float* cos, const float* sin, int32_t head_dim, const int32_t* positions,
                 int64_t rows, float* x, int64_t ldx, int32_t heads, cudaStream_t stream);

/// CPU reference: cpu::silu_gate. out[r, i] = gate / (1 + exp(-gate)) * up, i < n.
/// gate, up: [rows, ld] read; out: [rows, ld] written (may alias gate).
cudaError_t silu_gate(const float* gate, const float* up, float* out, int64_t rows, int64_t n,
                      int64_t ld, cudaStream_t stream);

/// CPU reference: f32_to_bf16 (core/dtype.h), round to nearest even.
/// x: [rows, ldx] float32 read; y: [rows, ldy] bf16 bits, columns [0, cols) written.
cudaError_t f32_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ldx, uint16_t* y,
                        int64_t ldy, cudaStream_t stream);

// --- Fused row kernels of the CUDA forward. Each one does, per element, exactly the
// operations of the unfused kernels above in the same order (nvcc runs with
// --fmad=false), so its output is bitwise the output of the unfused sequence. ---

/// rms_norm (heads = 1) then f32_to_bf16: yb[r, 0:dim] = bf16(x[r] / rms * weight).
/// x: [rows, ldx] read; weight: [dim] read; yb: [rows, ldyb] bf16 bits written.
cudaError_t rms_norm_bf16(const float* x, int64_t ldx, const float* weight, float eps, int64_t rows, int64_t dim,
                          uint16_t* yb, int64_t ldyb, cudaStream_t stream);

/// embedding then rms_norm_bf16 of the gathered rows (the first layer's input norm):
/// out[i, :] = table[tokens[i], :] as float32, yb[i, :] = bf16(rms_norm(out[i, :]) * weight).
/// table, tokens as embedding(); out: [n, ld_out] written; yb: [n, ldyb] written.
cudaError_t embedding_rms_norm_bf16(DType dtype, const void* table, int64_t dim, const int32_t* tokens, int32_t n,
                                    float* out, int64_t ld_out, const float* weight, float eps, uint16_t* yb,
                                    int64_t ldyb, cudaStream_t stream);

/// The residual add of a projection, then rms_norm_bf16 of the new residual:
///   x[r, c] = x[r, c] + (t[r, c] + bias[c])  (bias may be null: + t[r, c]),
///   yb[r, :] = bf16(rms_norm(x[r, :]) * weight).
/// x: [rows, ld] read and written; t: [rows, ld] read; yb: [rows, ldyb] written.
cudaError_t residual_rms_norm_bf16(float* x, const float* t, const float* bias, int64_t ld, const float* weight,
                                   float eps, int64_t rows, int64_t dim, uint16_t* yb, int64_t ldyb,
                                   cudaStream_t stream);

/// silu_gate then f32_to_bf16: yb[r, i] = bf16(gate / (1 + exp(-gate)) * up), i < n.
/// gate, up: [rows, ld] read; yb: [rows, ldyb] written.
cudaError_t silu_gate_bf16(const float* gate, const float* up, int64_t ld, int64_t rows, int64_t n, uint16_t* yb,
                           int64_t ldyb, cudaStream_t stream);

/// Per-head QK-norm (if q_norm / k_norm are not null), RoPE of q and k in place, then the
/// K/V scatter into the paged pool (kv_scatter), in one launch: one block per (row, head).
/// q, k, v: [rows, ld] (num_heads / num_kv_heads / num_kv_heads head vectors used); q and
/// k read and written, v read. slots: [rows]; pool_k, pool_v: [*, slot_stride] written at
/// the rows' slots (num_kv_heads * head_dim floats). head_dim <= 256, even.
cudaError_t qk_norm_rope_kv(float* q, float* k, const float* v, int64_t ld, int32_t num_heads, int32_t num_kv_heads,
                            int32_t head_dim, const float* q_norm, const float* k_norm, float eps, const float* cos,
                            const float* sin, const int32_t* positions, const int64_t* slots, int64_t rows,
                            float* pool_k, float* pool_v, int64_t slot_stride, cudaStream_t stream);

/// The same for a BF16 K/V store: the rotated K rows and the V rows go, rounded to BF16
/// (round to nearest even, as f32_to_bf16), to dense_k / dense_v ([rows, dense_ld] BF16
/// bits: the window's own K/V that the attention reads) and to rows_k / rows_v at the
/// rows' slots: BF16 bits (the pool), or with rows_f32 the FP32 values unrounded (a
/// staging buffer whose rows kv_scatter rounds later to the same bits). q and k in
/// place as above (FP32, unrounded).
cudaError_t qk_norm_rope_kv_bf16(float* q, float* k, const float* v, int64_t ld, int32_t num_heads,
                                 int32_t num_kv_heads, int32_t head_dim, const float* q_norm, const float* k_norm,
                                 float eps, const float* cos, const float* sin, const int32_t* positions,
                                 const int64_t* slots, int64_t rows, void* rows_k, void* rows_v, bool rows_f32,
                                 int64_t slot_stride, uint16_t* dense_k, uint16_t* dense_v, int64_t dense_ld,
                                 cudaStream_t stream);

/// CPU reference: cpu::argmax. out[r] = index of the largest of logits[r, 0:vocab); the
/// lowest index wins a tie. logits: [rows, ld] read; out: [rows] written.
cudaError_t argmax(const float* logits, int64_t rows, int64_t vocab, int64_t ld, int32_t* out,
                   cudaStream_t stream);

}  // namespace specpipe::cuda
