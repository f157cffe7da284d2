#pragma once
/// The CUDA transformer behind the device-neutral ForwardModel interface, so the actors
/// run it as they run the CPU one (`device: cuda:N`, issue 6).
///
/// The K/V of every window go into the model's own device pool during the forward; the
/// KvStore passed in keeps only the books (kv_config: host tensors off; with the prefix
/// cache on, the store copies shared blocks through block_copier(), on the device).
/// The sink is told about the rows with null pointers (kvstore/kv_write_sink.h); a sink
/// that stages a round's rows (NWOR) gets them as device rows kept out of the pool
/// instead, and writes the accepted ones through device_kv_pool(). The model's stream is
/// its own: each actor owning a model owns a stream.
#include <memory>

#include "model/cuda/cuda_transformer.h"
#include "model/forward_model.h"

namespace specpipe {

/// The device pool's memory services (ForwardModel::device_kv_pool) over a CudaTransformer.
class CudaKvPool final : public DeviceKvPool {
 public:
  CudaKvPool(CudaTransformer& model, Device device) : model_(model), device_(device) {}
  Device device() const override { return device_; }
  void* stream_handle() const override { return model_.stream(); }
  void* allocate(size_t bytes) override { return model_.device_alloc(bytes); }
  void release(void* ptr) override { model_.device_free(ptr); }
  void copy(void* dst, const void* src, size_t bytes) override { model_.copy_async(dst, src, bytes); }
  void write_slots(int32_t layer, const float* k, const float* v, const int64_t* slots, int64_t n) override {
    model_.write_slots(layer, k, v, slots, n);
  }

 private:
  CudaTransformer& model_;
  Device device_;
};

class CudaForwardModel final : public ForwardModel {
 public:
  explicit CudaForwardModel(std::unique_ptr<CudaTransformer> model);

  const ModelConfig& config() const override { return model_->config(); }
  Device device() const override { return device_; }
  Stream stream() const override { return Stream{device_, model_->stream()}; }
  KvStoreConfig kv_config(int32_t num_blocks, int32_t block_size) const override;
  void allocate_kv_pool(int32_t num_blocks, int32_t block_size) override;
  BlockCopier block_copier() override;
  /// Offload: the host tier in pinned memory, its blocks moved by copies queued on the
  /// model's stream, host-tier K/V streamed through a device ring (device_ring.h).
  HostMemoryAllocator* host_memory_allocator() override;
  HostTierCopier host_tier_copier() override;
  /// CudaTransformer::land_host_copies: every queued move applied and waited for.
  bool land_host_copies(const KvStore& kv) override;
  void enable_layer_ring(int32_t slots, bool overlap = true) override {
    model_->enable_layer_ring(slots, overlap);
    copy_overlap_ = overlap;
  }
  RingStats ring_stats() const override { return model_->ring_stats(); }
  DType kv_dtype() const override { return model_->kv_dtype(); }
  DeviceKvPool* device_kv_pool() override { return &pool_; }
  /// On the device (CudaTransformer::summarise_key_blocks).
  KeySummariser key_summariser() override;
  /// CudaTransformer::device_retrieval: the summaries kept on the device per sequence.
  std::shared_ptr<DeviceRetrieval> device_retrieval() override;
  /// CudaTransformer::prefill_layerwise, then release_layer_prefill: a serving engine
  /// holds the prompt-sized buffers only while one prefill runs. Its copies on the copy
  /// stream, or in line with enable_layer_ring's overlap off (offload.overlap: false).
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, Logits& out) override;
  int32_t max_forward_tokens() const override { return model_->max_tokens(); }
  int32_t max_chain_steps() const override { return CudaTransformer::kMaxChainSteps; }
  /// Sampled verify windows judged where their rows are (CudaTransformer's
  /// rejection_sample after the forward); not with the fused step, whose logits rows
  /// stay unwritten unless copied back.
  bool computes_sampled_verdicts() const override { return !model_->fused_step_active(); }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink,
               Logits& out) override;
  /// The chain on the device (CudaTransformer::forward_greedy_chain) up to its step
  /// limit, the host loop beyond.
  void forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            KvWriteSink& sink, std::vector<int32_t>& ids) override;
  /// The sampled chain on the device (CudaTransformer::forward_sampled_chain) up to its
  /// step limit; longer ones run at ForwardModel's pace.
  void forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps, const ChainSampling& sampling,
                             const KvStore& kv, KvWriteSink& sink, std::vector<int32_t>& ids,
                             std::vector<float>& q) override;
  /// CudaTransformer::launch_sampled_chain (up to its step limit: longer chains throw).
  Event launch_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps, const ChainSampling& sampling,
                             const KvStore& kv, KvWriteSink& sink, DeviceIds& ids) override;
  /// The device chain's q rows (CudaTransformer::chain_q) when it kept them there.
  DeviceRows sampled_chain_q() const override;
  void read_device_rows(const DeviceRows& rows, int32_t count, int32_t cols, float* out) const override;
  /// CudaTransformer::launch_greedy_chain (up to its step limit; longer chains run at
  /// once through the host loop).
  Event launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                            KvWriteSink& sink) override;
  /// CudaTransformer::launch_greedy_chain in two launches with an event after `early`
  /// steps: early_ids are the device's (its argmax buffer, or the slot's buffer).
  Event launch_greedy_chain_early(std::span<const ForwardWindow> windows, int32_t steps, int32_t early,
                                  const KvStore& kv, KvWriteSink& sink, DeviceIds& early_ids, int32_t slot) override;
  void collect_greedy_chain(std::vector<int32_t>& ids) override;
  /// CudaTransformer::place_tokens: the ids are read on the device, behind `ready`.
  void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> ready) override {
    model_->place_tokens(placed, ready);
  }
  std::span<const int32_t> placed_tokens() const override { return model_->placed_tokens(); }
  /// CudaTransformer::join_before_sync: the next forward's one sync covers `e` too.
  void join_next_forward(const Event& e) override { model_->join_before_sync(e); }

 private:
  /// The rows a greedy chain of `steps` writes: each window's tokens, then a token per step.
  void report_chain_rows(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv, KvWriteSink& sink);
  /// Tells the sink about rows [start, start + n) of each window: already in the pool,
  /// or (staged) in the model's staging buffer, window after window.
  void report_rows(std::span<const ForwardWindow> windows, std::span<const int32_t> starts,
                   std::span<const int32_t> counts, KvWriteSink& sink, bool staged = false);
  /// logits_ (rows_ rows a window) into `out`: the ids alone or the rows.
  void copy_logits(bool ids_only, Logits& out) const;
  static int32_t current_device();
  std::unique_ptr<CudaTransformer> model_;
  Device device_;
  bool chain_q_on_device_ = false;  // the last sampled chain left its q rows on the device
  Event chain_q_ready_;             // after them (a launched chain's event; empty: it synced)
  CudaKvPool pool_;
  CudaLogits logits_;
  std::vector<int32_t> rows_;
  std::vector<WindowKvRows> written_;
  bool launched_on_host_ = false;  // the launched chain was too long for the device chain
  bool copy_overlap_ = true;        // enable_layer_ring's overlap
};

/// Registers CUDA events with core/device.h (Event::record on a CUDA stream). Idempotent;
/// CudaForwardModel calls it.
void register_cuda_events();

/// Free and total bytes of a device's memory (cudaMemGetInfo).
struct DeviceMemory {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemory device_memory(int32_t device);

}  // namespace specpipe
