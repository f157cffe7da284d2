#pragma once
/// One forward step on the device (nano-vllm's ModelRunner.run_model): embedding, every
/// decoder layer's kernels, the final norm, the LM head and the argmax of the rows that
/// want logits, enqueued on one stream over a CudaTransformer's device state. Nothing is
/// synchronised; the caller captures it into a graph or runs it eagerly. A small forward
/// may go as the one fused kernel instead (model/cuda/fused_step.h). model/cuda/ internal.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/attention_plan.h"
#include "model/config.h"
#include "model/cuda/cuda_gemm.h"
#include "model/cuda/device_ring.h"
#include "model/cuda/transformer_state.h"

namespace specpipe::cuda {

/// Rows [first_row, first_row + n) of q go to host + layer * n * q_dim ([n, q_dim] per
/// layer, pinned memory) after each layer's RoPE; or, with `pos` set, are reduced on the
/// device instead (quest_query_sums, key_summaries.h) into pos / neg + layer * kv_dim.
struct QueryCopy {
  int32_t first_row, n;
  float* host;
  double* pos = nullptr;
  double* neg = nullptr;
  /// SpecPV retrieval by attention mass (QueryTap::wants_block_mass, FP32 K/V, no view):
  /// after each layer l's attention, the window's mass per prefix block
  /// (attention_block_mass, key_summaries.h) into mass + l * blocks on the device and
  /// copied to mass_host + l * blocks; lse: its scratch. Null mass: not asked.
  float* mass = nullptr;
  float* mass_host = nullptr;
  float* lse = nullptr;
  int32_t prefix_len = 0, blocks = 0;
  const int32_t* table_offset = nullptr;  ///< [layers] host: the window's table in each layer's tables
};

/// One step's metadata on the device (pointers into the uploaded metadata buffer,
/// forward_plan.h's layout) and where its argmax ids go.
struct StepMeta {
  const int64_t* slots;   ///< [total] pool slots (staged rounds: staging rows)
  const int32_t* tokens;  ///< [total] token ids
  const int32_t* pos;     ///< [total] positions
  const int32_t* tw;      ///< [total] window of each row
  const int32_t* lr;      ///< [logit_rows] row of each logits row
  const int32_t* bt;      ///< the windows' block tables
  const AttentionWindowDesc* win;
  int32_t total, logit_rows;
  int32_t* argmax;  ///< [logit_rows] out: the rows' argmax
  int32_t min_window_rows;  ///< the fewest rows of a window (attention's AttentionBatch::min_window_rows)
  bool prefix_settled = false;  ///< the pool prefix predates the forward (AttentionBatch::prefix_settled)
  /// A sampled chain's step (non-null sample_u): after the argmax, each logits row r with
  /// sample_inv_t[r] > 0 draws its token into argmax[r] with sample_u[r] and writes its
  /// distribution to sample_q + r * vocab (kernels/cuda/sampling.h, sample_chain_rows).
  const float* sample_inv_t = nullptr;
  const double* sample_u = nullptr;
  float* sample_q = nullptr;
};

/// Kernel groups a timing study leaves out (CudaTransformerOptions::timing_skip; the
/// logits are then meaningless). None in every other forward.
struct KernelSkip {
  bool rest = false;       ///< mask 1: every kernel but the GEMMs
  bool attention = false;  ///< mask 2: the attention kernels
  bool gemms = false;      ///< mask 4: the GEMMs
  static KernelSkip from_mask(int32_t mask) { return {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0}; }
};

/// What stays the same over the steps of one forward.
struct StepSettings {
  CudaGemm gemm;        ///< resolved (never automatic)
  bool fused;           ///< steps of at most kFusedMaxRows rows run as the fused kernel
  bool stage;           ///< K/V rows to the staging buffer instead of the pool
  bool copy_logits;     ///< the fused kernel writes the logits rows too
  int32_t max_tokens;   ///< rows the scratch and staging buffers hold
  int32_t max_chunks;   ///< attention's chunk grid (the pool's capacity when graphed)
  KernelSkip skip;
  /// Offload: the layer ring holding the host-tier K/V the block tables point into
  /// (ring_table_entry); each layer's attention reads its slot. Null: pool only.
  DeviceLayerRing* ring = nullptr;
  /// SpecPV partial views (ForwardPlan::layer_windows; single-step forwards): layer l's
  /// attention reads its windows at layer_meta + l * layer_stride and its block tables
  /// layer_tables bytes further, instead of the step's win / bt. Null: win / bt.
  const unsigned char* layer_meta = nullptr;
  size_t layer_stride = 0, layer_tables = 0;
  /// SpecPV retrieval (single-step forwards): windows whose query rows (RoPE applied) go
  /// to the host in every layer, or are summed on the device, num_query_copies of them.
  const QueryCopy* query_copies = nullptr;
  int32_t num_query_copies = 0;
  /// A sampled chain (CudaTransformer::forward_sampled_chain): each step's StepMeta gets
  /// the sampling pointers into TransformerState's sample_params and chain_q.
  bool sample = false;
};

/// Enqueues one step of `m.total` rows on `stream`: enqueue_embedding, every layer's
/// enqueue_decoder_layer over the scratch rows (x, xb), enqueue_head; or the fused kernel.
void enqueue_decoder_step(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                          cudaStream_t stream);

/// The rows a layer carries to the next: the FP32 residual x [m.total, hidden] and xb,
/// the BF16 input of the layer's first GEMM [m.total, hidden] (written at the layer's end
/// as the next layer's normalised input). A step uses the scratch's; a layer-wise
/// prefill (layer_prefill.h) keeps the whole prompt's and runs each layer over chunks.
/// The scratch xb still serves inside a layer (attention output, MLP input).
struct LayerRows {
  float* x;
  uint16_t* xb;
};

/// The token embeddings of m's rows and layer 0's input norm into `rows`.
void enqueue_embedding(const TransformerState& d, const ModelConfig& c, const StepMeta& m, LayerRows rows,
                       cudaStream_t stream);
/// Layer `layer` over m's rows. `dense` (k null: none) is a layer-wise prefill's slot of
/// this layer: the rows' K/V go to it at m.slots (dense positions) instead of the pool,
/// and the block tables' ring entries (ring_table_entry) read it; the ring is not used.
void enqueue_decoder_layer(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                           int32_t layer, LayerRows rows, DeviceRingSlot dense, cudaStream_t stream);
/// The final norm, LM head and argmax of m's logits rows, read from x [m.total, hidden].
void enqueue_head(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                  const float* x, cudaStream_t stream);

}  // namespace specpipe::cuda
