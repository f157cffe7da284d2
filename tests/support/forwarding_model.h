#pragma once
/// A test's decorator of a pipeline's target: every call the engine makes after loading
/// goes to the real model; a test overrides the one it changes (a refusal, a failure, a
/// count). Load-time calls (pools, copiers, the ring) were made on the inner model.
#include <memory>
#include <utility>

#include "model/forward_model.h"

namespace specpipe::test {

class ForwardingModel : public ForwardModel {
 public:
  explicit ForwardingModel(std::shared_ptr<ForwardModel> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  Device device() const override { return inner_->device(); }
  Stream stream() const override { return inner_->stream(); }
  KvStoreConfig kv_config(int32_t blocks, int32_t block_size) const override {
    return inner_->kv_config(blocks, block_size);
  }
  DType kv_dtype() const override { return inner_->kv_dtype(); }
  int32_t max_forward_tokens() const override { return inner_->max_forward_tokens(); }
  bool computes_sampled_verdicts() const override { return inner_->computes_sampled_verdicts(); }
  RingStats ring_stats() const override { return inner_->ring_stats(); }
  bool land_host_copies(const KvStore& kv) override { return inner_->land_host_copies(kv); }
  void join_next_forward(const Event& e) override { inner_->join_next_forward(e); }
  // A device drafter's drafts reach the verify forward as placed tokens (ARCHITECTURE.md
  // section 4): the wrapper must pass them on, or the default throws.
  void place_next_tokens(std::span<const PlacedToken> placed, std::span<const Event> ready) override {
    inner_->place_next_tokens(placed, ready);
  }
  std::span<const int32_t> placed_tokens() const override { return inner_->placed_tokens(); }
  // Sampled drafts' q rows left on a shared device reach the verdict as device rows.
  void read_device_rows(const DeviceRows& rows, int32_t count, int32_t cols, float* out) const override {
    inner_->read_device_rows(rows, count, cols, out);
  }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    inner_->forward(windows, kv, sink, out);
  }
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, Logits& out) override {
    inner_->prefill_layerwise(seq, prompt, kv, out);
  }

 protected:
  std::shared_ptr<ForwardModel> inner_;
};

}  // namespace specpipe::test
