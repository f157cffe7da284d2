#pragma once
/// The built-in `drafter`: a small draft model with its own KV store.
///
/// Each round the drafter first feeds the tokens its KV has not seen (the prompt at a
/// sequence's first proposal, then normally the pending token, plus the last draft when
/// all drafts were accepted), after trimming
/// whatever the target rejected, then extends every sequence one token at a time. All
/// sequences of a round share each forward (varlen batch). When every drafting sequence
/// drafts greedily, the round is one ForwardModel::forward_greedy_chain of the longest
/// gamma (a device model then drafts all of them without a host round trip per token);
/// a sequence with a shorter gamma keeps that many. A sequence at gamma 0 costs nothing:
/// its K/V catch up, batched with the others', when it drafts again.
///
/// Draft-ahead (optional): after a greedy chain round has gone to the target
/// (after_propose), the drafter goes on drafting as if the target will accept every draft:
/// it feeds the last draft and drafts gamma + 1 tokens more, the first of them its guess
/// of the target's bonus token. On a device that chain runs while the target verifies.
/// When the target accepts every draft and its bonus is the guess, the next round's
/// drafts are already made; otherwise the K/V that still match the context are kept and
/// the rest is left to be overwritten. The drafts are the same tokens either way (batch
/// invariance: a row's result does not depend on the window it came in); only when they
/// are computed moves.
///
/// Drafts kept on the device (keep_drafts_on_device, for a consumer that reads them
/// there: the verifier's forward, ARCHITECTURE.md section 4): a chain round whose drafts
/// the draft-ahead did not make launches its chain instead of waiting for it, and
/// returns proposals whose tokens are on the device (Proposal::on_device). With
/// draft-ahead the same chain goes on past the drafts as the draft-ahead chain would
/// (feed the last draft, draft gamma + 1 more), so a round has no host sync of the
/// drafter's own; the next propose() collects the chain and fills in the books. With
/// several rounds in flight (scheduler.micro_batches) each round's drafts are copied into
/// its slot's buffer behind the chain's steps, so the next round's chain (launched before
/// this round's verdict) cannot overwrite them; that next propose() still waits for the
/// previous chain on the host when it is not done yet (its ids come back in the pinned
/// buffer the next chain reuses).
#include <map>
#include <memory>
#include <utility>

#include "kvstore/kv_store.h"
#include "model/forward_model.h"
#include "pipeline/drafter.h"

namespace specpipe {

class ModelDrafter final : public Drafter {
 public:
  /// The draft KV store gets `kv_blocks` blocks of `block_size` tokens (no prefix cache:
  /// it holds unverified drafts); a device model's pool is allocated here.
  ModelDrafter(std::unique_ptr<ForwardModel> model, int32_t kv_blocks, int32_t block_size,
               int32_t prefill_chunk, bool draft_ahead = false);

  std::string name() const override { return "draft-model"; }
  void start(RequestId request, std::span<const int32_t> context) override;
  void propose(std::span<const DraftItem> items, std::vector<Proposal>& out) override;
  void finish(RequestId request) override;
  std::optional<KvOccupancy> kv_occupancy() const override { return kv_.occupancy(); }
  Stream stream() const override { return model_->stream(); }
  /// Launches the draft-ahead chain of the last round (when on and that round was a
  /// greedy chain); returns the event after it (ForwardModel::launch_greedy_chain).
  Event after_propose() override;
  double take_prefill_ms() override { return std::exchange(prefill_ms_, 0.0); }
  /// Chain rounds launch their chain and hand out its drafts on the device (see above).
  /// Only for a consumer that takes Proposal::on_device (the draft actor's verifier).
  /// `slots` > 1: up to that many rounds in flight (scheduler.micro_batches); each round's
  /// drafts are kept in its slot's buffer (round_slot, ForwardModel::
  /// launch_greedy_chain_early), so the next round's chain does not overwrite them.
  void keep_drafts_on_device(bool on, int32_t slots = 1) {
    drafts_on_device_ = on;
    slots_ = slots;
  }
  /// Sampled chain rounds leave their q rows on the draft model's device
  /// (Proposal::q_on_device, where the model keeps them: ForwardModel::sampled_chain_q)
  /// instead of copying them to the host. Only for a consumer that reads that device's
  /// memory, with one round in flight (the next sampled chain overwrites them).
  void keep_q_on_device(bool on) { q_on_device_ = on; }
  /// With keep_drafts_on_device and keep_q_on_device: a round whose drafting items are
  /// all sampled at a pure temperature and one gamma launches its sampled chain
  /// (ForwardModel::launch_sampled_chain) instead of waiting for it, and hands out the
  /// drafts on the device (Proposal::on_device) beside their q rows, so the round's one
  /// host sync is the verdict's; the next propose() collects the ids (settle_ahead).
  void keep_sampled_drafts_on_device(bool on) { sampled_drafts_on_device_ = on; }
  void round_slot(int32_t slot) override { slot_ = slot; }
  /// On: a sequence started while no other is running, after a round of at most one
  /// sequence (the server serves one request at a time), has its context prefilled into the
  /// draft KV at once, beside the target's prefill of the same prompt (the scheduler sends
  /// DraftStart before the admission), instead of in its first proposal, where the catch-up
  /// held up the request's first token (a device drafter at one client: about 0.75 ms a
  /// request, docs/BENCHMARKS.md section 8). Sequences started beside others stay lazy:
  /// their catch-ups are prefilled together in their first proposal, and a verify_plan
  /// strategy that never drafts for one costs it no draft prefill.
  void prefill_when_idle(bool on) { prefill_when_idle_ = on; }
  /// Start-up warm-up (models.warm_graphs, pipeline/warm_start.h), before any sequence:
  /// runs, twice each, the chains one sequence's rounds use at gammas 1..max_gamma on a
  /// scratch sequence, released after, with catch-up windows of 1 and 2 tokens: the
  /// sampled chains (forward_sampled_chain, up to max_chain_steps, longest first), then
  /// the greedy ones (draft_round_chains). Each launched chain's event is waited for
  /// before it is collected, so its host syncs are the same in every process. Returns
  /// the chains run.
  int32_t warm_graphs(int32_t max_gamma);
  /// Rounds whose drafts (some of them) left on the device (Proposal::on_device).
  int64_t device_draft_rounds() const { return device_draft_rounds_; }

  /// Draft-ahead counts, per sequence: chains launched, and rounds whose drafts they
  /// made (the others still keep their matching K/V).
  struct AheadStats {
    int64_t launched = 0;
    int64_t used = 0;
  };
  const AheadStats& ahead_stats() const { return ahead_stats_; }

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
  /// Step 0's window of one sequence: its catch-up (at most `max_feed` tokens: longer ones
  /// went through prefill_long_catch_ups first); reserves `extra` positions after it.
  ForwardWindow first_window(Sequence& s, size_t max_feed, int32_t extra, bool greedy);
  /// Prefills, in one batched pass, every catch-up longer than `max_feed` of the items
  /// marked in `feeds` (all but its last token): sequences back from gamma 0 after many
  /// rounds, or drafting for the first time, cost one forward per chunk together.
  void prefill_long_catch_ups(std::span<Sequence* const> seqs, const std::vector<bool>& feeds, size_t max_feed);
  /// A chain round's step-0 windows (first_window, gamma - 1 positions reserved after
  /// each) of the items with gamma > 0 whose drafts the draft-ahead did not make, and
  /// their indices.
  void chain_windows(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                     int32_t gamma, const std::vector<bool>& ready, std::vector<ForwardWindow>& windows,
                     std::vector<size_t>& owner);
  /// The chain path of propose (every drafting item greedy or sampled at a pure
  /// temperature: chain_samples): one chain of `gamma` steps, the longest of the round,
  /// for the items with gamma > 0 whose drafts the draft-ahead did not already make
  /// (ready[i]); each keeps its own gamma's drafts. With sampled items it is a sampled
  /// chain (ForwardModel::forward_sampled_chain): each sampled item's uniforms are drawn
  /// from its rng first, in the order the step-by-step path draws them, and its drafts
  /// keep the q rows they were drawn from.
  void propose_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                     const std::vector<bool>& ready, int32_t gamma, std::vector<Proposal>& out);

  /// propose_chain without waiting (keep_drafts_on_device): launches one chain for the
  /// items the draft-ahead did not make, their drafts then (with draft-ahead) the
  /// draft-ahead chain's gamma + 1 steps, which the ready items join fed their last draft.
  /// Returns false when it cannot (gammas not all equal, gamma 0 included; with
  /// draft-ahead, a chain of 2 gamma + 1 steps too long for the model or without room):
  /// the caller runs propose_chain, whose windows it may have prepared already
  /// (first_window gives the same ones again).
  bool launch_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                    const std::vector<bool>& ready, std::vector<Proposal>& out);
  /// propose_chain's sampled chain without waiting (keep_sampled_drafts_on_device): the
  /// same uniforms from the same rngs, the same windows; drafts and q rows stay on the
  /// device. Returns false (nothing done) unless every item drafts, sampled, at one gamma
  /// within the model's chain and none was made ahead: the caller runs propose_chain.
  bool launch_sampled_chain(std::span<const DraftItem> items, std::span<Sequence* const> seqs, size_t max_feed,
                            const std::vector<bool>& ready, std::vector<Proposal>& out);

  /// A sequence's part of a finished draft-ahead chain.
  struct Ahead {
    int32_t from = 0;          // committed KV length at launch: fed[i] is at from + i
    std::vector<int32_t> fed;  // the round's last draft, then every chain id but the last
    std::vector<int32_t> ids;  // the chain's ids: ids[i] is the draft after fed[0..i]
  };
  /// Waits for a launched chain (no sync once its event is complete), commits the K/V
  /// of the drafts it made and files each live sequence's Ahead.
  void settle_ahead();
  /// Applies a sequence's Ahead once its context has this round's tokens: commits the K/V
  /// that match the context and, when `want` > 0 drafts are all made already, returns
  /// true with them in `drafts` (the K/V then hold the context and every draft but the
  /// last, as after a chain).
  bool adopt_ahead(RequestId request, Sequence& s, int32_t want, std::vector<int32_t>& drafts);

  std::unique_ptr<ForwardModel> model_;
  KvStore kv_;
  DirectKvWriter writer_;
  int32_t prefill_chunk_;
  double prefill_ms_ = 0;  // catch-up prefills since take_prefill_ms
  std::map<RequestId, Sequence> sequences_;
  Logits logits_;
  std::vector<float> q_scratch_;
  std::vector<int32_t> chain_ids_;
  std::vector<float> chain_q_;  // a sampled chain's q rows, [steps x windows x vocab]

  bool draft_ahead_;
  bool drafts_on_device_ = false;
  bool q_on_device_ = false;  // keep_q_on_device
  bool sampled_drafts_on_device_ = false;  // keep_sampled_drafts_on_device
  bool prefill_when_idle_ = false;  // prefill_when_idle
  size_t last_round_sequences_ = 0;  // sequences of the last propose(): > 1, not idle
  int32_t slots_ = 1;               // rounds in flight (keep_drafts_on_device)
  int32_t slot_ = 0;                // the round's slot (round_slot)
  int64_t device_draft_rounds_ = 0;
  /// The chain launched and not yet settled, by window: the draft-ahead chain of
  /// after_propose (drafts 0: the window fed `first` at position `from`) or launch_chain's
  /// (drafts gamma for a window that drafted this round: its first gamma ids are them).
  struct Launched {
    std::vector<RequestId> requests;
    std::vector<int32_t> drafts, first, from;
    int32_t steps = 0;
    void clear() {
      requests.clear();
      drafts.clear();
      first.clear();
      from.clear();
    }
    void add(RequestId request, int32_t made, int32_t fed, int32_t at) {
      requests.push_back(request);
      drafts.push_back(made);
      first.push_back(fed);
      from.push_back(at);
    }
  };
  bool ahead_running_ = false;                    // a launched chain not yet settled
  Launched launched_;
  Event launched_done_;                           // launch_chain's, until after_propose hands it out
  std::map<RequestId, Ahead> ahead_;              // settled, waiting for the next round
  std::vector<std::pair<RequestId, int32_t>> last_drafts_;  // (request, last draft) of a chain round
  int32_t last_gamma_ = 0;
  AheadStats ahead_stats_;
};

}  // namespace specpipe
