#include "model/forward_model.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/sampling.h"

namespace specpipe {

std::span<const float> Logits::row(size_t w, int32_t i) const {
  if (w >= rows_.size() || i < 0 || i >= rows_[w])
    fail(ErrorCode::invalid_argument, "logits row {} of window {} was not computed", i, w);
  if (!ids_.empty())
    fail(ErrorCode::invalid_argument, "logits row {} of window {}: an ids-only forward returned its argmax alone", i,
         w);
  return {data_.data() + (first_[w] + i) * vocab_, static_cast<size_t>(vocab_)};
}

int32_t Logits::argmax(size_t w, int32_t i) const {
  if (w >= rows_.size() || i < 0 || i >= rows_[w])
    fail(ErrorCode::invalid_argument, "logits row {} of window {} was not computed", i, w);
  if (!ids_.empty()) return ids_[static_cast<size_t>(first_[w] + i)];
  return cpu::argmax(row(w, i));
}

void Logits::assign(const std::vector<std::vector<float>>& rows) {
  vocab_ = rows.empty() ? 0 : static_cast<int32_t>(rows.front().size());
  data_.clear();
  ids_.clear();
  first_.clear();
  rows_.clear();
  verdicts_.clear();
  for (const auto& r : rows) {
    if (static_cast<int32_t>(r.size()) != vocab_) fail(ErrorCode::internal, "logits rows of different sizes");
    first_.push_back(static_cast<int64_t>(rows_.size()));
    rows_.push_back(1);
    data_.insert(data_.end(), r.begin(), r.end());
  }
}

void Logits::layout(int32_t vocab, std::span<const int32_t> rows_per_window) {
  vocab_ = vocab;
  first_.clear();
  verdicts_.clear();
  rows_.assign(rows_per_window.begin(), rows_per_window.end());
  int64_t total = 0;
  for (const int32_t r : rows_) {
    first_.push_back(total);
    total += r;
  }
}

std::span<float> Logits::prepare(int32_t vocab, std::span<const int32_t> rows_per_window) {
  layout(vocab, rows_per_window);
  ids_.clear();
  const int64_t total = first_.empty() ? 0 : first_.back() + rows_.back();
  data_.resize(static_cast<size_t>(total * vocab));
  return data_;
}

std::span<int32_t> Logits::prepare_ids(int32_t vocab, std::span<const int32_t> rows_per_window) {
  layout(vocab, rows_per_window);
  data_.clear();
  const int64_t total = first_.empty() ? 0 : first_.back() + rows_.back();
  ids_.resize(static_cast<size_t>(total));
  return ids_;
}

KvStoreConfig kv_store_layout(const ModelConfig& config, int32_t num_blocks, int32_t block_size, bool device_pool) {
  KvStoreConfig k;
  k.num_layers = config.num_layers;
  k.num_kv_heads = config.num_kv_heads;
  k.head_dim = config.head_dim;
  k.block_size = block_size;
  k.num_blocks = num_blocks;
  // A device pool has no host copy: shared-block copy-on-write would copy host tensors.
  k.prefix_cache = !device_pool;
  k.host_tensors = !device_pool;
  return k;
}

std::vector<int32_t> window_starts(std::span<const ForwardWindow> windows, const KvStore& kv,
                                   const ModelConfig& c, int32_t extra) {
  std::vector<int32_t> starts;
  starts.reserve(windows.size());
  for (const ForwardWindow& w : windows) {
    const int32_t start = w.start < 0 ? kv.length(w.seq) : w.start;
    const auto n = static_cast<int64_t>(w.tokens.size());
    const int64_t end = start + n + extra;  // one past the last position written
    if (n == 0) fail(ErrorCode::invalid_argument, "forward: empty window for sequence {}", w.seq);
    if (start < kv.length(w.seq))
      fail(ErrorCode::invalid_argument, "forward: window of sequence {} starts at {}, inside its {} committed tokens",
           w.seq, start, kv.length(w.seq));
    if (kv.reserved(w.seq) < end)
      fail(ErrorCode::invalid_argument, "forward: sequence {} has {} positions reserved, the window needs {}", w.seq,
           kv.reserved(w.seq), end);
    if (end > c.max_position_embeddings)
      fail(ErrorCode::out_of_capacity, "forward: sequence {} would reach position {}, past the model's {} positions",
           w.seq, end - 1, c.max_position_embeddings);
    for (const int32_t t : w.tokens)
      if (t < 0 || t >= c.vocab_size)
        fail(ErrorCode::invalid_argument, "forward: token id {} of sequence {} is outside the vocabulary of {}", t,
             w.seq, c.vocab_size);
    starts.push_back(start);
  }
  return starts;
}

void ForwardModel::enable_layer_ring(int32_t slots, bool /*overlap*/) {
  fail(ErrorCode::unsupported,
       "offload: the {} forward does not stream host-tier K/V yet (a layer ring of {} slots was asked for; the CPU "
       "backend has it)",
       device().to_string(), slots);
}

void ForwardModel::prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& /*kv*/,
                                     Logits& /*out*/) {
  fail(ErrorCode::unsupported, "layer-wise prefill: the {} forward has none (sequence {}, {} tokens)",
       device().to_string(), seq, prompt.size());
}

namespace {
/// The default chains' loop: `steps` forwards, each window fed the token `pick(s, w,
/// logits)` chose from its last row in the step before; ids gets them step-major.
/// ids_only(w): window w needs its argmax only (no logits row).
template <typename IdsOnly, typename Pick>
void chain_steps(ForwardModel& m, std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                 KvWriteSink& sink, std::vector<int32_t>& ids, IdsOnly ids_only, Pick pick) {
  const std::vector<int32_t> starts = window_starts(windows, kv, m.config(), steps - 1);
  std::vector<ForwardWindow> step(windows.begin(), windows.end());
  for (size_t w = 0; w < step.size(); ++w) {
    step[w].start = starts[w];  // explicit: nothing is committed between the steps
    step[w].logits = LogitsMode::last;
    step[w].ids_only = ids_only(w);
  }
  std::vector<int32_t> fed(windows.size());
  Logits logits;
  ids.clear();
  for (int32_t s = 0; s < steps; ++s) {
    m.forward(step, kv, sink, logits);
    for (size_t w = 0; w < step.size(); ++w) ids.push_back(pick(s, w, logits));
    for (size_t w = 0; w < step.size(); ++w) {
      step[w].start += static_cast<int32_t>(step[w].tokens.size());
      fed[w] = ids[ids.size() - step.size() + w];
      step[w].tokens = {&fed[w], 1};
    }
  }
}
}  // namespace

void ForwardModel::forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                        KvWriteSink& sink, std::vector<int32_t>& ids) {
  if (steps < 1) fail(ErrorCode::invalid_argument, "forward: a greedy chain of {} steps", steps);
  chain_steps(
      *this, windows, steps, kv, sink, ids, [](size_t) { return true; },
      [](int32_t, size_t w, const Logits& logits) { return logits.argmax(w); });
}

void check_chain_sampling(const ForwardModel::ChainSampling& sampling, size_t windows, int32_t steps) {
  if (sampling.temperature.size() != windows || sampling.uniforms.size() != windows * static_cast<size_t>(steps))
    fail(ErrorCode::invalid_argument, "forward: a sampled chain of {} windows and {} steps with {} temperatures and {} uniforms",
         windows, steps, sampling.temperature.size(), sampling.uniforms.size());
  for (float t : sampling.temperature)
    if (!(t >= 0.0f) || !std::isfinite(t))
      fail(ErrorCode::invalid_argument, "forward: a sampled chain at temperature {}", t);
}

void ForwardModel::read_device_rows(const DeviceRows& /*rows*/, int32_t /*count*/, int32_t /*cols*/,
                                    float* /*out*/) const {
  fail(ErrorCode::internal, "forward: device rows read on a model without a device");
}

void ForwardModel::forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                         const ChainSampling& sampling, const KvStore& kv, KvWriteSink& sink,
                                         std::vector<int32_t>& ids, std::vector<float>& q) {
  if (steps < 1) fail(ErrorCode::invalid_argument, "forward: a sampled chain of {} steps", steps);
  check_chain_sampling(sampling, windows.size(), steps);
  const size_t n = windows.size();
  const auto vocab = static_cast<size_t>(config().vocab_size);
  std::vector<float> row_q;
  q.assign(static_cast<size_t>(steps) * n * vocab, 0.0f);
  chain_steps(
      *this, windows, steps, kv, sink, ids, [&](size_t w) { return sampling.temperature[w] == 0.0f; },
      [&](int32_t s, size_t w, const Logits& logits) {
        const float t = sampling.temperature[w];
        if (t == 0.0f) return logits.argmax(w);
        // As draft_sample: the distribution, then one draw from it.
        const size_t at = static_cast<size_t>(s) * n + w;
        cpu::sampling_distribution(logits.row(w), cpu::SamplingParams{t, 0, 1.0f}, row_q);
        std::copy(row_q.begin(), row_q.end(), q.begin() + static_cast<std::ptrdiff_t>(at * vocab));
        return cpu::sample_from(row_q, sampling.uniforms[at]);
      });
}

Event ForwardModel::launch_sampled_chain(std::span<const ForwardWindow> /*windows*/, int32_t /*steps*/,
                                         const ChainSampling& /*sampling*/, const KvStore& /*kv*/,
                                         KvWriteSink& /*sink*/, DeviceIds& /*ids*/) {
  fail(ErrorCode::invalid_argument, "forward: {} launches no sampled chain on a device", device().to_string());
}

Event ForwardModel::launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                        KvWriteSink& sink) {
  launched_ = false;
  forward_greedy_chain(windows, steps, kv, sink, launched_ids_);
  launched_ = true;
  return {};
}

Event ForwardModel::launch_greedy_chain_early(std::span<const ForwardWindow> windows, int32_t steps, int32_t early,
                                              const KvStore& kv, KvWriteSink& sink, DeviceIds& early_ids,
                                              int32_t slot) {
  if (early < 1 || early > steps)
    fail(ErrorCode::invalid_argument, "forward: the ids of {} early steps of a chain of {}", early, steps);
  Event done = ForwardModel::launch_greedy_chain(windows, steps, kv, sink);
  const int32_t* ids = launched_ids_.data();
  if (slot >= 0) {
    std::vector<int32_t>& kept = early_slots_[slot];
    kept.assign(launched_ids_.begin(), launched_ids_.begin() + static_cast<std::ptrdiff_t>(early) *
                                                                   static_cast<std::ptrdiff_t>(windows.size()));
    ids = kept.data();
  }
  early_ids = {ids, 1, Device{}, done};
  return done;
}

void ForwardModel::place_next_tokens(std::span<const PlacedToken> /*placed*/, std::span<const Event> /*ready*/) {
  fail(ErrorCode::invalid_argument, "forward: {} reads no input tokens from device memory", device().to_string());
}

void ForwardModel::collect_greedy_chain(std::vector<int32_t>& ids) {
  if (!launched_) fail(ErrorCode::invalid_argument, "forward: no launched greedy chain to collect");
  launched_ = false;
  ids = std::move(launched_ids_);
  launched_ids_.clear();
}

}  // namespace specpipe
