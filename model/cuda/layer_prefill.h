#pragma once
/// The device buffers of a layer-wise prefill (CudaTransformer::prefill_layerwise, issue
/// 16 item 5; the plan is layer_prefill_plan.h). model/cuda/ internal.
///
/// The whole prompt goes through one layer at a time, in chunks of max_tokens rows (one
/// launch of each kernel a chunk, the GEMMs' row limit). Each layer's K/V of the whole
/// prompt go to a dense slot; once the layer's last chunk is enqueued, a job on the copy
/// stream (cuda_copy_stream.h: ordered after that compute by an event) copies the slot's
/// blocks to the sequence's host-tier blocks (D2H) and pool blocks (D2D) while the next
/// layer computes into the other slot. Layer l + 2 reuses slot l mod 2 only after the
/// compute stream has waited for that job's event: the buffer reuse is ordered by events,
/// the host never waits inside the layer loop (the seed copies synchronously because its
/// asynchronous offload reused buffers unordered). Two slots are enough: one layer's copy
/// (its K/V bytes over PCIe) is a small part of that layer's compute at any prompt length
/// (the attention alone grows with the prompt).
///
/// What must fit on the device besides the model and pool: two slots of one layer's K/V
/// of the prompt (2 x 2 x tokens x kv_dim elements of the K/V dtype), the residual rows
/// of the prompt (tokens x hidden FP32 + BF16: 6 bytes an element) and the attention's
/// split-K workspace for max_tokens rows over the prompt's keys. prefill_layerwise
/// refuses (Error(out_of_capacity)) when the device lacks it; the caller then prefills
/// chunk by chunk (every layer of a chunk per forward, host K/V through the ring).
#include <memory>

#include "model/cuda/cuda_copy_stream.h"
#include "model/cuda/device_memory.h"

namespace specpipe::cuda {

/// Dense slots of a layer-wise prefill: one layer computes into one while the other's
/// copies run.
constexpr int32_t kPrefillSlots = 2;

/// Kept between prefills, grown when short (after waiting for the device), never shrunk.
struct LayerPrefillBuffers {
  DeviceBuffer slots;      ///< [kPrefillSlots][K, V][blocks, block_size, kv_dim] of the K/V dtype
  size_t slot_bytes = 0;   ///< one slot's K (or V)
  DeviceBuffer rows;       ///< x FP32 [tokens, hidden], then xb BF16 [tokens, hidden]
  DeviceBuffer meta;       ///< the plan's metadata
  PinnedBuffer meta_host;  ///< its upload buffer
  std::unique_ptr<CudaCopyStream> copies;  ///< made per overlap setting
};

}  // namespace specpipe::cuda
