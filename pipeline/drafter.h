#pragma once
/// The `drafter` slot: what proposes tokens for the target to verify.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"
#include "kernels/cpu/sampling.h"
#include "kvstore/kv_store.h"
#include "pipeline/rng.h"

namespace specpipe {

using RequestId = int64_t;

/// One sequence's part of a drafting round.
struct DraftItem {
  RequestId request;
  /// Tokens appended to the sequence's context since its previous round (since start()
  /// for the first round). The last one is the pending token: the target's latest
  /// token, which the proposals continue.
  std::span<const int32_t> appended;
  int32_t gamma;                 ///< tokens wanted; 0 = none (a plain decode step)
  cpu::SamplingParams sampling;  ///< temperature 0: greedy drafts
  Rng* rng;                      ///< the request's stream (used when sampling)
  /// Keep only the first `rewind` tokens of the context before appending (-1: all): the
  /// target rolled back tokens the drafter had seen (SpecPV exact mode).
  int32_t rewind = -1;
};

struct Proposal {
  std::vector<int32_t> tokens;        ///< at most gamma
  /// q[i]: the distribution tokens[i] was drawn from (sampling with a model drafter);
  /// empty when the proposal is deterministic (greedy, or n-gram lookup).
  std::vector<std::vector<float>> q;
  /// The drafts were ready before the round asked (the model drafter's draft-ahead).
  bool made_ahead = false;
  /// Not null: the drafts are still on the drafter's device and `tokens` holds as many
  /// placeholders (0); tokens[i] is on_device.ids[i * stride] once on_device.ready is
  /// complete (the model drafter with keep_drafts_on_device: a chain launched without a
  /// host sync). Valid until the drafter's next propose() or finish(); with more than
  /// one round in flight (Drafter::round_slot), until its next propose() of the same slot.
  DeviceIds on_device;
  /// Not null: q is empty and the rows are on the drafter's device, row i = tokens[i]'s
  /// distribution (the model drafter with keep_q_on_device). Valid until the drafter's
  /// next propose() or finish().
  DeviceRows q_on_device;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  /// A new sequence whose context is `context` (the prompt without its last token: that
  /// one arrives as the first round's pending token).
  virtual void start(RequestId request, std::span<const int32_t> context) = 0;
  /// Proposals for every item, batched where the drafter can. `out` is resized to
  /// items.size().
  virtual void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) = 0;
  /// The next propose() drafts for a round in micro-batch slot `slot` (RoundBatch::slot,
  /// scheduler.micro_batches > 1): no other round in flight holds it, so the drafts a
  /// drafter leaves on its device for that round may stay in the slot's buffer until the
  /// next round of the same slot is proposed (that round starts after this one's verdict).
  virtual void round_slot(int32_t /*slot*/) {}
  /// The sequence ended; frees what start() took.
  virtual void finish(RequestId request) = 0;
  /// Called once the round's proposals are made, before they go to the target: a
  /// drafter may start work for the next round that overlaps the verification (the model
  /// drafter's draft-ahead). It must not change what the next propose() returns. Returns
  /// the event after the work it left running on stream() (complete: none); the round
  /// carries it to the verifier, whose forward joins it (ForwardModel::join_next_forward)
  /// so that the next propose() finds it done without a host sync.
  virtual Event after_propose() { return {}; }
  /// Milliseconds the proposals since the last call spent prefilling prompts (a model
  /// drafter catches a new sequence's context up at its first proposal); the draft actor
  /// counts them as prefill, not as drafting.
  virtual double take_prefill_ms() { return 0.0; }
  /// The drafter's own KV store, if it has one.
  virtual std::optional<KvOccupancy> kv_occupancy() const { return std::nullopt; }
  /// The stream the drafter's device work runs on (the draft actor records the round's
  /// event on it). Host drafters: the CPU stream.
  virtual Stream stream() const { return Stream{}; }
};

}  // namespace specpipe
