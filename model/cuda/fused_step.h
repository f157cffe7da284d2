#pragma once
/// One forward step of a small decoder (Llama / Qwen2 / Qwen3 without biases) as ONE
/// persistent kernel: embedding, every layer, final norm, LM head and argmax, the phases
/// separated by grid-wide barriers instead of kernel boundaries (issue 6: the draft
/// model's latency).
///
/// Why: a draft step of the demo pair is ~24 kernels of a few microseconds each, every one
/// bound by launch and drain latency, not by bytes (3.7M parameters live in L2). Here the
/// phases are: per layer qkv GEMM | q/k-norm, RoPE, K/V to the pool | attention partials
/// over key chunks | combine + o_proj + residual | norm + gate_up | SiLU gate + down_proj +
/// residual; then norm + LM head + per-block argmax | final argmax. Each block recomputes
/// the small per-row prologues (RMSNorm of <= 16 rows, the attention combine, the SiLU
/// gate) into shared memory itself, so only the GEMM outputs cross blocks.
///
/// Numerics: BF16 weights and GEMM inputs, FP32 accumulation and activations, like the
/// per-kernel forward, but NOT the same bits (other reduction orders in the norms and the
/// attention). A row's result depends on its own tokens and keys only (every GEMM column
/// is one warp's fixed chain; attention chunks follow the row's position), so the kernel
/// is batch invariant on its own. Meant for a draft model: a target must take one kernel
/// path for a token in every window size, which the row limit here would break.
///
/// Device pointers and a stream; enqueues one cooperative launch (capturable in a CUDA
/// graph) and returns its status. Host-safe header (no device code).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention_plan.h"

namespace specpipe::cuda {

/// Most tokens (rows) of one fused step: decode steps, chain steps and verify-sized windows.
constexpr int32_t kFusedMaxRows = 16;
/// Split-K chunks per (row, kv head) in the attention phase; a chunk holds
/// 32 * ceil(keys / (32 * kFusedMaxChunks)) keys of the row.
constexpr int32_t kFusedMaxChunks = 32;

/// One layer's device tensors (CudaTransformer's layout: q|k|v and gate|up fused).
struct FusedLayer {
  const uint16_t* qkv;      ///< [q_dim + 2 kv_dim, hidden] bf16
  const uint16_t* o;        ///< [hidden, q_dim] bf16
  const uint16_t* gate_up;  ///< [2 inter, hidden] bf16 (gate rows first)
  const uint16_t* down;     ///< [hidden, inter] bf16
  const float* input_norm;  ///< [hidden]
  const float* post_norm;   ///< [hidden]
  const float* q_norm;      ///< [head_dim] or null (no QK-norm)
  const float* k_norm;      ///< [head_dim] or null
  float* pool_k;            ///< [slots, kv_dim] FP32 paged pool (kvstore/kv_tensors.h layout)
  float* pool_v;
};

struct FusedModel {
  int32_t layers, hidden, heads, kv_heads, head_dim, inter, vocab, block_size;
  float eps;
  const uint16_t* embed;       ///< [vocab, hidden] bf16
  const uint16_t* lm_head;     ///< [vocab, hidden] bf16
  const float* final_norm;     ///< [hidden]
  const float* rope_cos;       ///< [max_positions, head_dim / 2] (cpu::RopeTable)
  const float* rope_sin;
  const FusedLayer* layer;     ///< [layers] in device memory
};

/// One step's rows, in the per-kernel forward's metadata layout (all device memory).
struct FusedStep {
  const int32_t* tokens;      ///< [rows] ids in [0, vocab)
  const int32_t* positions;   ///< [rows]
  const int64_t* slots;       ///< [rows] pool slot of each row's K/V
  const int32_t* token_window;             ///< [rows] window of each row
  const AttentionWindowDesc* windows;      ///< block_table_offset is what is read
  const int32_t* block_tables;             ///< the windows' tables, back to back
  const int32_t* logit_index;              ///< [logit_rows] rows that want logits
  int32_t rows, logit_rows;                ///< 1 <= rows <= kFusedMaxRows, logit_rows <= rows
  float* logits;                           ///< [logit_rows, vocab] written, or null
  int32_t* argmax;                         ///< [logit_rows] written (lowest index wins ties)
};

/// Global scratch of the kernel; fused_scratch_floats() floats in all, carved in order.
struct FusedScratch {
  float* x;        ///< [kFusedMaxRows, hidden] the residual stream
  float* qkv;      ///< [kFusedMaxRows, q_dim + 2 kv_dim]
  float* gate_up;  ///< [kFusedMaxRows, 2 inter]
  float* partial;  ///< [kFusedMaxRows, heads, kFusedMaxChunks, head_dim + 2]
  float* best;     ///< [blocks, kFusedMaxRows, 2] per-block argmax candidates
  int32_t* table_at;  ///< [kFusedMaxRows] each row's block-table offset (one load, not three)
  /// Profiling, or null: block 0 writes clock64() at the start, after every barrier and
  /// at the end (kFusedTraceSlots entries at most, the unused ones left alone).
  long long* trace = nullptr;
};
constexpr int32_t kFusedTraceSlots = 8 * 64 + 4;

/// Null when fused_step serves the shape, else why not (for logs and refusals): biases
/// are not served, head_dim must be a multiple of 64 up to 128, a GQA group at most 8,
/// hidden / q_dim / inter multiples of 8 up to 4096.
const char* fused_step_unsupported(const FusedModel& m, bool has_biases);

/// Floats of FusedScratch for `blocks` blocks; fused_scratch_carve lays them out.
int64_t fused_scratch_floats(const FusedModel& m, int32_t blocks);
FusedScratch fused_scratch_carve(const FusedModel& m, float* base);

/// The grid fused_step should use on `device`: one block per SM when the kernel fits
/// there (it needs every block resident at once). `wanted` > 0 caps it. Writes 0 when
/// the kernel cannot run co-resident at all.
cudaError_t fused_step_blocks(const FusedModel& m, int32_t device, int32_t wanted, int32_t* blocks);

/// Enqueues the step on `stream` (one cooperative launch of `blocks` blocks).
cudaError_t fused_step(const FusedModel& m, const FusedStep& step, const FusedScratch& scratch, int32_t blocks,
                       cudaStream_t stream);

}  // namespace specpipe::cuda
