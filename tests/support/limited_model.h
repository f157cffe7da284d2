#pragma once
/// A real (CPU) model behind a ForwardModel of its own, with a tokens-per-forward limit
/// like a device model's (ForwardModel::max_forward_tokens); a forward past it fails the
/// test. Counts the forwards and the largest. Lets tests hand a shared test::model to
/// an owner of a ForwardModel (ModelDrafter) without a second copy of the weights.
/// Counts sampled chains too (forward_sampled_chain, run by the default).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "model/transformer.h"

namespace specpipe::test {

class LimitedModel final : public ForwardModel {
 public:
  explicit LimitedModel(Transformer& inner, int32_t limit = INT32_MAX) : inner_(inner), limit_(limit) {}
  const ModelConfig& config() const override { return inner_.config(); }
  Device device() const override { return inner_.device(); }
  KvStoreConfig kv_config(int32_t blocks, int32_t block_size) const override {
    return inner_.kv_config(blocks, block_size);
  }
  int32_t max_forward_tokens() const override { return limit_; }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    size_t total = 0;
    for (const ForwardWindow& w : windows) total += w.tokens.size();
    EXPECT_LE(total, static_cast<size_t>(limit_));
    largest = std::max(largest, total);
    ++forwards;
    inner_.forward(windows, kv, sink, out);
  }
  void forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps, const ChainSampling& sampling,
                             const KvStore& kv, KvWriteSink& sink, std::vector<int32_t>& ids,
                             std::vector<float>& q) override {
    ++sampled_chains;
    ForwardModel::forward_sampled_chain(windows, steps, sampling, kv, sink, ids, q);
  }
  size_t largest = 0;
  int forwards = 0;
  int sampled_chains = 0;  ///< forward_sampled_chain calls

 private:
  Transformer& inner_;
  int32_t limit_;
};

}  // namespace specpipe::test
