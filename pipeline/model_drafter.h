#pragma once
/// The built-in `drafter`: a small draft model with its own KV store.
///
/// Each round the drafter first feeds the tokens its KV has not seen (the prompt at a
/// sequence's first proposal, then normally the pending token, plus the last draft when
/// all drafts were accepted), after trimming
/// whatever the target rejected, then extends every sequence one token at a time. All
/// sequences of a round share each forward (varlen batch). When every sequence drafts
/// greedily the same number of tokens, the round is one ForwardModel::forward_greedy_chain
/// (a device model then drafts all of them without a host round trip per token).
#include <map>
#include <memory>

#include "kvstore/kv_store.h"
#include "model/forward_model.h"
#include "pipeline/drafter.h"

namespace specpipe {

class ModelDrafter final : public Drafter {
 public:
  /// The draft KV store gets `kv_blocks` blocks of `block_size` tokens (no prefix cache:
  /// it holds unverified drafts); a device model's pool is allocated here.
  ModelDrafter(std::unique_ptr<ForwardModel> model, int32_t kv_blocks, int32_t block_size,
               int32_t prefill_chunk);

  std::string name() const override { return "draft-model"; }
  void start(RequestId request, std::span<const int32_t> context) override;
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override;
  void finish(RequestId request) override;
  std::optional<KvOccupancy> kv_occupancy() const override { return kv_.occupancy(); }
  Stream stream() const override { return model_->stream(); }

  const KvStore& kv() const { return kv_; }
  const ForwardModel& model() const { return *model_; }

 private:
  struct Sequence {
    SeqId seq;
    std::vector<int32_t> context;  // every token of the sequence so far
  };
  Sequence& at(RequestId request);
  /// Trims the draft KV to its common prefix with the context; returns the tokens to feed.
  std::span<const int32_t> catch_up(Sequence& s);
  /// Step 0's window of one sequence: its catch-up, after prefilling all but the last
  /// token of one longer than `max_feed`; reserves `extra` positions after it.
  ForwardWindow first_window(Sequence& s, size_t max_feed, int32_t extra, bool greedy);
  /// The chain path of propose (all greedy, one gamma).
  void propose_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                     std::vector<Proposal>& out);

  std::unique_ptr<ForwardModel> model_;
  KvStore kv_;
  DirectKvWriter writer_;
  int32_t prefill_chunk_;
  std::map<RequestId, Sequence> sequences_;
  Logits logits_;
  std::vector<float> q_scratch_;
  std::vector<int32_t> chain_ids_;
};

}  // namespace specpipe
