#pragma once
/// Start-up warm-up on a device (models.warm_graphs): the forward shapes one sequence's
/// rounds use at each gamma 0..max_gamma are run before the server answers, so a device
/// model captures their CUDA graphs (model/cuda/graph_cache.h: a shape's first forward
/// runs eagerly, its second is captured) at start, not in the first requests, and a
/// verify_plan strategy (SCV) exploring other gammas at one client finds them ready.
/// What the draft model runs at a gamma is decided by draft_round_chains, which
/// ModelDrafter's rounds use too (pipeline/model_drafter.h).
#include <cstdint>
#include <span>

#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/forward_model.h"

namespace specpipe {

/// Longest draft-ahead chain the drafter launches: a device model runs chains of up to 16
/// steps on the device (CudaTransformer::kMaxChainSteps), longer ones from the host,
/// which would not overlap anything.
constexpr int32_t kMaxAheadSteps = 16;

/// The greedy chains a model drafter runs for one sequence's round at `gamma` >= 1.
struct DraftRoundChains {
  /// Drafts kept on the device: the chain launched with the ids of its first `gamma`
  /// steps early (launch_greedy_chain_early): 2 gamma + 1 steps with draft-ahead (the
  /// drafts, then the last draft fed and gamma + 1 more), gamma without. 0: such a round
  /// is not launched (too long for the device chain), it drafts with `chain`.
  int32_t launched = 0;
  /// Steps of the chain drafted and waited for on the host (forward_greedy_chain): gamma.
  int32_t chain = 0;
  /// With draft-ahead: the chain after a round whose drafts were made ahead, or after a
  /// `chain` round (launch_greedy_chain): gamma + 1 steps; 0 when too long.
  int32_t ahead = 0;
};
DraftRoundChains draft_round_chains(int32_t gamma, bool draft_ahead, bool drafts_on_device, int32_t max_chain_steps);

/// A sink that drops every row's report (warm-up forwards write K/V nobody keeps).
class DiscardKvRows final : public KvWriteSink {
 public:
  void write_layer(int32_t, std::span<const WindowKvRows>) override {}
};

/// Runs one window of n tokens (every row's logits, greedy ids only, as the verifier's
/// windows) for n = 1..max_window, twice each, on a scratch sequence of `kv` released
/// after: the target's verify windows of one sequence at gammas 0..max_window - 2 (a
/// recomputed token, the pending token, the drafts; gamma.h). Returns the forwards run.
/// For a store nobody uses yet (the pool blocks it borrows are overwritten before read).
int32_t warm_verify_windows(ForwardModel& target, KvStore& kv, int32_t max_window);

}  // namespace specpipe
