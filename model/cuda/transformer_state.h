#pragma once
/// What a CudaTransformer holds on the device (and the pinned host buffers it talks to it
/// through): weights, the KV pool, scratch, the metadata buffers, GEMM handles, graphs,
/// the fused step's tables. model/cuda/ internal, shared by cuda_transformer.cpp (which
/// allocates it) and decoder_step.cpp (which enqueues a step over it).
#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kvstore/write_back.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/device_ring.h"
#include "model/cuda/forward_plan.h"
#include "model/cuda/fused_step.h"
#include "model/cuda/graph_cache.h"
#include "model/cuda/layer_prefill.h"

namespace specpipe::cuda {

struct TransformerState {
  struct Layer {
    uint16_t *qkv = nullptr, *o = nullptr, *gate_up = nullptr, *down = nullptr;  // bf16
    float *qkv_bias = nullptr, *o_bias = nullptr, *gate_up_bias = nullptr, *down_bias = nullptr;
    float *input_norm = nullptr, *post_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
  };
  DeviceBuffer weights_bf16, weights_f32, rope, pool, scratch, meta, workspace;
  // Attention's chunk counters ([max_tokens, kv_heads], zero between launches): the chunk
  // kernel's last block per (row, kv head) merges the row, one launch a layer.
  DeviceBuffer attention_counters;
  PinnedBuffer meta_host, out_host;
  // The argmax ids come back after the logits rows of out_host ([max_tokens, vocab] floats).
  int32_t* host_ids(int64_t max_tokens, int64_t vocab) const {
    return reinterpret_cast<int32_t*>(out_host.as<float>() + max_tokens * vocab);
  }
  std::vector<Layer> layers;
  uint16_t* embed = nullptr;
  uint16_t* lm_head = nullptr;
  float* final_norm = nullptr;
  float *rope_cos = nullptr, *rope_sin = nullptr;
  // Each layer's pool K and V: elements of kv_dtype (FP32, or BF16 bits behind the float*;
  // only FP32 code may read them as floats).
  std::vector<float*> pool_k, pool_v;
  DType kv_dtype = DType::f32;
  // BF16 store: the forward's window K/V as the attention reads them ([max_tokens, 2 *
  // kv_dim] BF16 bits, K then V; qk_norm_rope_kv_bf16 writes it a layer at a time).
  DeviceBuffer kv_dense;
  // scratch
  float *x = nullptr, *h = nullptr, *qkv = nullptr, *attn = nullptr, *gu = nullptr, *tmp = nullptr,
        *logits = nullptr;
  uint16_t* xb = nullptr;
  int32_t* argmax = nullptr;
  // Early chain ids kept per round in flight (CudaTransformer::launch_greedy_chain's
  // slot): [max_tokens * kMaxChainSteps] ids each, allocated at a slot's first use.
  std::vector<std::unique_ptr<DeviceBuffer>> early_slots;
  // Sampled chains (CudaTransformer::forward_sampled_chain): per window 1 / temperature
  // ([max_tokens] floats, 0: greedy), then the uniforms ([kMaxChainSteps, max_tokens]
  // doubles), uploaded from sample_host before each chain (graphs read them at replay);
  // the q rows [steps, windows, vocab] floats (grown as needed: graphs bake the buffer)
  // and their pinned copy.
  DeviceBuffer sample_params, chain_q;
  PinnedBuffer sample_host, chain_q_host;
  // Sampled verdicts (CudaTransformer::enqueue_verdicts): window descriptors, draft ids,
  // uniforms, q rows, then the verdicts; staged in the pinned twin (grown as needed).
  DeviceBuffer verdict_dev;
  PinnedBuffer verdict_host;
  cublasLtHandle_t lt = nullptr;
  LtGemm g_qkv, g_o, g_gate_up, g_down, g_head;
  int32_t num_blocks = 0, block_size = 0;
  int32_t capacity_chunks = 0;  // split-K chunks of the longest row the pool holds (graphs)
  // The fixed metadata layout of meta / meta_host (forward_plan.h), set with the pool.
  ForwardMetaLayout meta_layout;
  GraphCache graphs;
  // Block copies queued by the KV store's owner (another thread), applied in order on the
  // stream in front of the next forward: copy-on-write in the pool, and (offload) whole
  // blocks between the pool and the host tier. One queue: a pool block freed by an
  // offload may be the next copy-on-write's target, and its D2H copy must go first.
  // SpecPV view copies (KvStore::set_view_copies) copy one layer of a host block into
  // that layer of a pool block: host_layer_to_pool, with its layer.
  enum class CopyKind { pool_to_pool, pool_to_host, host_to_pool, host_layer_to_pool };
  struct PendingCopy {
    CopyKind kind;
    int32_t src, dst;
    int32_t layer = -1;  // host_layer_to_pool only
  };
  std::mutex copies_mutex;
  std::vector<PendingCopy> copies;
  // Offload write-back (kvstore/write_back.h): pool -> host moves taken off the queue,
  // copied by the next ring forward's per-layer jobs on the copy stream (or in line in
  // front of a forward that streams no host K/V, or of a queued copy touching them).
  WriteBackBatch write_back;
  // Offload: the layer ring streaming host-tier K/V (enable_layer_ring).
  std::unique_ptr<DeviceLayerRing> ring;
  // Layer-wise prefill (prefill_layerwise): its slots, rows, metadata and copy stream.
  std::unique_ptr<LayerPrefillBuffers> prefill;
  // Forwards and the staging strategy's device calls (another actor's thread) take turns
  // on the stream: nothing from another thread may land inside a graph capture.
  std::mutex stream_mutex;
  // Staged rounds: [layer][max_tokens, kv_dim] K and V rows kept out of the pool
  // (allocated at the first staged forward); slots for write_slots.
  DeviceBuffer stage, write_slots;
  float* stage_rows(int32_t layer, bool v, int64_t max_tokens, int64_t kvd) const {
    const int64_t layer_floats = max_tokens * kvd;
    return stage.as<float>() + (2 * int64_t{layer} + (v ? 1 : 0)) * layer_floats;
  }

  // SpecPV partial views: each layer's attention windows and block tables (forward_plan.h,
  // pack_view_meta), layer l at l * view_stride; the stride only grows (graphs bake it).
  // Query taps: the tapped windows' query rows of every layer, copied back (QueryCopy).
  DeviceBuffer view_meta;
  PinnedBuffer view_meta_host, query_host;
  size_t view_stride = 0;
  // Block summaries (key_summaries.h): the block ids, then each layer's Kmax and Kmin.
  DeviceBuffer summaries;
  // SpecPV retrieval on the device (device_retrieval.cpp): the query sums of the last
  // tapped forward's windows ([windows][2][layers][kv_dim] doubles: pos, then neg), and
  // each sequence's block summaries, [layers][capacity][kv_dim] floats of Kmax then the
  // same of Kmin, by block index; scratch for scores and the chosen blocks.
  DeviceBuffer query_sums;
  // SpecPV retrieval by attention mass (QueryCopy::mass): per tap [layers][blocks] on the
  // device and pinned on the host, the kernels' scratch, each tap's table offsets.
  DeviceBuffer block_mass, block_mass_lse;
  PinnedBuffer block_mass_host;
  std::vector<int32_t> block_mass_tables;
  struct SeqSummaries {
    std::unique_ptr<DeviceBuffer> mem;
    int32_t capacity = 0;
  };
  std::map<int64_t, SeqSummaries> seq_summaries;
  DeviceBuffer retrieval_scratch;
  PinnedBuffer retrieval_top;

  // The fused step (options.fused_step; model/cuda/fused_step.h), set up with the pool:
  // its layer table on the device, its scratch, its grid (0: not served, fused_why says why).
  DeviceBuffer fused_layers, fused_scratch, fused_trace_buf;
  FusedModel fused{};
  FusedScratch fused_sc{};
  int32_t fused_blocks = 0;
  // The gate_up GEMM writes the SiLU gate's BF16 output itself (gemm_mma_silu_bf16; its
  // weights interleaved by 8): mma without the fused step or MLP biases.
  bool gate_up_silu = false;
  // The qkv GEMM rotates q and k and writes the K/V rows itself (gemm_mma_rope_kv_bf16;
  // its q and k rows interleaved by half heads): mma without the fused step, QK-norm or
  // qkv biases, FP32 K/V, head_dim % 16 == 0; SPECPIPE_QKV_ROPE=0 turns it off.
  bool qkv_rope = false;
  std::string fused_why = "off";

  TransformerState() = default;
  TransformerState(const TransformerState&) = delete;
  TransformerState& operator=(const TransformerState&) = delete;
  ~TransformerState() {
    ring.reset();     // its copies may still read the host tier
    prefill.reset();  // or write it
    graphs.clear();
    if (lt) cublasLtDestroy(lt);
  }
};

}  // namespace specpipe::cuda
