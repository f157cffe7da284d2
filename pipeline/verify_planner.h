#pragma once
/// The `verify_plan` slot: how many drafts each sequence gets this round. The built-in
/// strategy gives every sequence its requested gamma; a plugin (SCV) chooses from
/// acceptance estimates and the measured costs the CostModel keeps.
#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pipeline/drafter.h"
#include "pipeline/plugin_instance.h"

namespace specpipe {

struct PlanSequence {
  RequestId request;
  int32_t gamma;           ///< the request's gamma (ABI: requested_gamma)
  /// The most it may get this round: slots.drafter.max_gamma, less near the end of the
  /// model's positions, 0 for a request that does not speculate (ABI: max_gamma).
  int32_t gamma_cap;
  int32_t context_length;
};

/// A round of n sequences with gammas g_i, G = max g_i, costs
///   (G > 0 ? draft_base_ms : 0) + G * draft_step_ms + verify_base_ms + verify_token_ms * sum_i (1 + g_i).
struct PlanCosts {
  double draft_step_ms = 0;    ///< one more draft step for the batch (the marginal cost)
  /// A round's fixed cost with or without drafts: with verify_token_ms * n, what a round
  /// of n sequences without drafts costs.
  double verify_base_ms = 0;
  double verify_token_ms = 0;  ///< each window token's extra cost
  int32_t token_budget = 0;    ///< most window tokens per verify pass (0: none)
  /// What a round pays once any sequence drafts, whatever the gamma: the drafter's fixed
  /// cost (on a device its sync and catch-up window) and the round's extra host work.
  /// Speculation off for the whole batch saves it.
  double draft_base_ms = 0;
  /// A batch of one sequence only: what a round that drafted g tokens usually costs end to
  /// end, [g] for g = 0 (plain) up; 0 where fewer than CostModel::kUsualRounds were seen.
  /// On a device the line above cannot follow it: the first draft pays the drafter's
  /// launch, and a long draft-ahead chain outruns the verify forward beside it.
  std::vector<double> round_ms_by_gamma;
};

struct PlanObservation {
  RequestId request;
  int32_t proposed;
  int32_t accepted;
};

class VerifyPlanner {
 public:
  virtual ~VerifyPlanner() = default;
  virtual std::string name() const = 0;
  /// gamma[i] in [0, sequences[i].gamma_cap].
  virtual void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) = 0;
  /// Whether it plans from the costs (then the scheduler runs a round without drafts
  /// where CostModel::plain_due says so, to measure them); the fixed strategy does not.
  virtual bool plans_from_costs() const { return true; }
  virtual void observe(std::span<const PlanObservation> /*observations*/) {}
  virtual void forget(RequestId /*request*/) {}
  virtual nlohmann::json metrics() const { return nlohmann::json::object(); }
};

/// The built-in strategy: every sequence gets its requested gamma (within its limit).
class FixedGammaPlanner final : public VerifyPlanner {
 public:
  std::string name() const override { return "fixed"; }
  bool plans_from_costs() const override { return false; }
  void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) override;
};

/// A plugin in the slot. Outputs are checked; a failing or misbehaving plugin is disabled
/// and the fixed strategy plans from then on (counted in metrics()).
class PluginVerifyPlanner final : public VerifyPlanner {
 public:
  explicit PluginVerifyPlanner(std::shared_ptr<PluginInstance> plugin) : plugin_(std::move(plugin)) {}
  std::string name() const override { return plugin_->name(); }
  void plan(std::span<const PlanSequence> sequences, const PlanCosts& costs, std::span<int32_t> gamma) override;
  void observe(std::span<const PlanObservation> observations) override;
  void forget(RequestId request) override;
  nlohmann::json metrics() const override { return plugin_->metrics(); }

 private:
  std::shared_ptr<PluginInstance> plugin_;
  FixedGammaPlanner fallback_;
};

/// y ~ intercept + slope * x over the recent points, by exponentially weighted least
/// squares (about the last 30 points count).
class RecentLine {
 public:
  void add(double x, double y);
  bool empty() const { return w_ <= 0; }
  /// Whether x varied enough to tell slope from intercept: its variance is above
  /// `min_variance` (0: any variance beyond rounding).
  bool has_slope(double min_variance = 0) const;
  double raw_slope() const;  ///< the fitted slope, any sign; needs has_slope()
  double slope() const;      ///< >= 0; needs has_slope()
  double intercept() const;  ///< >= 0, with slope(); needs has_slope()
  double mean_x() const { return wx_ / w_; }
  double mean_y() const { return wy_ / w_; }

 private:
  double w_ = 0, wx_ = 0, wy_ = 0, wxx_ = 0, wxy_ = 0;
};

/// One round as the scheduler measured it.
struct RoundSample {
  int32_t sequences = 0;      ///< windows in the round (its batch size)
  int32_t draft_steps = 0;    ///< the largest gamma drafted (0: no drafts)
  int64_t window_tokens = 0;  ///< verify window tokens (recompute + pending + drafts)
  double draft_ms = 0;        ///< the draft actor's time
  double verify_ms = 0;       ///< the verifier's time (its forward and verdicts)
  double wall_ms = 0;         ///< the round from the scheduler's send to its verdicts
  /// A sequence drafted for the first time or after a pause: the draft model caught up
  /// on its context in this round. Not a usual round: only what it cost beyond one is
  /// kept (CostModel::costs).
  bool catch_up = false;
};

/// Running estimates of the costs a planner needs, by batch size, from each round's
/// measurements. What decides is what a round costs end to end (`wall_ms`: the drafts,
/// the verify forward, the syncs, the actors' messages), which on a device differs from
/// batch to batch in ways no single line over window tokens follows (a window of k
/// tokens costs about one step at batch 1 and about k steps at batch 128; drafting adds a
/// fixed cost that grows with the batch). So per batch size (to the nearest power of two)
/// it keeps three lines: the verify forward over window tokens (the slope: a window
/// token's cost), rounds without drafts (what plain decoding costs at this batch), and
/// rounds with drafts over their draft steps, less their extra window tokens at that
/// slope (intercept: plain plus the drafter's fixed cost; slope: a draft step). Plain and
/// drafting rounds alike are kept as the last few and read by their lower third (the
/// drafting line goes through each draft length's, once it has 3 rounds), so the rounds
/// at a shape's first sightings, which run eagerly or capture a CUDA graph, make neither
/// look dear.
///
/// A batch size with plain rounds but no drafting round of its own takes the nearest
/// size's drafting costs, scaled by the two sizes' plain rounds. Where a batch size lacks
/// both the pooled estimates fill in (every round, as before the batch split): the verify
/// forward's line over window tokens and the draft time's line over draft steps; a
/// planning strategy gets a plain round there first (plain_due). A drafter's fixed cost per round goes to draft_base_ms, so the
/// planner weighs one more draft at its marginal price and sees what turning speculation
/// off saves. Until draft steps have varied by about a step, or when the fit is
/// implausible (a negative fixed cost), all draft time counts per step: the per-step cost
/// is never above the plain average.
///
/// Catch-up rounds (RoundSample::catch_up) stay out of the lines, but what each cost
/// beyond the usual drafting round its size and gamma have (the draft model's prefill of a
/// prompt or of what was decided while a sequence was off) is a cost of drafting at that
/// batch size: from 2 sequences up it is averaged over the size's drafting rounds and
/// added to draft_base_ms. Left out, drafting looked cheap at 8 clients on an H100, where
/// each request's first round carries its prompt's catch-up (every few rounds there) and
/// every fixed gamma lost to plain. At one sequence the prompt's catch-up happens at the
/// request's start when the drafter drafts ahead, and the plan is by measured rounds.
class CostModel {
 public:
  void add_round(const RoundSample& round);
  /// The costs of a round of `sequences` windows.
  PlanCosts costs(int32_t sequences, int32_t token_budget) const;
  /// Whether a round of `sequences` windows should go without drafts, to measure what
  /// speculation off costs at this batch size: a strategy that drafts at a batch size
  /// never sees a plain round there otherwise, and the drafting line's value at zero
  /// steps (which holds the drafter's fixed cost) stood in for it, so turning off looked
  /// as if it saved nothing. Due at once at a size with fewer than kUsualRounds plain
  /// rounds, after 2 drafting rounds while fewer than kPlainKept are known there, then
  /// after every kPlainEvery.
  bool plain_due(int32_t sequences) const;

  /// Batch sizes are kept to the nearest power of two: [0, kBuckets).
  static constexpr size_t kBuckets = 12;
  static size_t bucket_of(int32_t sequences);
  /// Plain rounds kept per batch size: their lower third is the estimate, so the rounds
  /// that ran eagerly or captured a CUDA graph (a shape's first sightings) do not count.
  static constexpr size_t kPlainKept = 5;
  static constexpr int32_t kPlainEvery = 64;
  /// Drafting rounds kept per batch size (a ring): the line goes through the lower third
  /// of each draft length's rounds among them.
  static constexpr size_t kDraftKept = 16;
  /// Rounds of one draft length a drafting line needs before it counts that length: a
  /// shape's first two rounds on a device run eagerly and capture a CUDA graph.
  static constexpr size_t kUsualRounds = 3;
  /// Rounds of one sequence kept per draft length (g = 0 .. kOneMaxGamma), for
  /// PlanCosts::round_ms_by_gamma, after the first kOneSkipped of each length: at one
  /// sequence on a device a draft length brings several new shapes (its verify window,
  /// the chain's catch-up windows), each run eagerly and then captured, and on an H100 a
  /// length read from its first 3 rounds cost 0.86 ms where it costs 0.3-0.4. With the
  /// shapes captured at start (models.warm_graphs) 3 skipped ran no faster (0.98x, H100):
  /// SPECPIPE_ONE_SKIPPED=N overrides it for such A/B timings.
  static constexpr size_t kOneKept = 8;
  static constexpr size_t kOneSkipped = 8;
  static constexpr int32_t kOneMaxGamma = 16;
  /// A length not drafted in this many rounds of one sequence is not given: its rounds may
  /// have been a stall's, and a length that looks dear is not tried again otherwise.
  static constexpr uint64_t kOneFresh = 256;

 private:
  struct PlainRound {
    double sequences = 0, wall_ms = 0;
  };
  struct DraftRound {
    double steps = 0, extra_tokens = 0, wall_ms = 0;  // extra_tokens: the drafts' window tokens
    double ms = 0;  // wall_ms less extra_tokens at the slope when read (sorted_drafting)
  };
  /// The drafting rounds' line: per draft length its lower third, weighted by how many
  /// rounds had that length.
  struct DraftLine {
    double mean_steps = 0, mean_ms = 0, step_variance = 0, slope = 0;
  };
  struct DraftCosts {
    double step_ms = 0, base_ms = 0;
  };
  struct Bucket {
    RecentLine verify;    // verify_ms ~ base + per token * window tokens
    std::array<PlainRound, kPlainKept> plain{};  // the last rounds without drafts (a ring)
    size_t plain_seen = 0;                        // rounds without drafts so far
    int32_t since_plain = 0;                      // drafting rounds since the last plain one
    std::array<DraftRound, kDraftKept> drafting{};  // the last rounds with drafts (a ring)
    size_t drafting_seen = 0;                        // rounds with drafts so far
    // Catch-ups' cost beyond a usual round, decayed per drafting round (catch-ups
    // included), and those rounds' decayed count: their ratio is the share a drafting
    // round pays.
    double catch_up_ms = 0, catch_up_rounds = 0;
    /// The kept drafting rounds, their drafts' window tokens off at `token_ms` each,
    /// sorted by draft length, then cost; returns how many.
    size_t sorted_drafting(std::array<DraftRound, kDraftKept>& at, double token_ms) const;
    /// Whether a draft length has kUsualRounds rounds among those kept: a line.
    bool has_drafting_line() const;
    DraftLine drafting_line(double token_ms) const;  // needs has_drafting_line()
    /// A draft step and the drafter's fixed cost from the drafting line, against
    /// `plain_ref` (plain at the sizes measured; with plain not measured, the line's value
    /// at zero steps replaces it when positive). Needs has_drafting_line().
    DraftCosts draft_costs(double token_ms, double& plain_ref, bool plain_measured) const;
    /// The usual plain round (the lower third of those kept) at `n` windows (each kept round moved to n at `token_ms`
    /// a window), or at the sizes measured when token_ms < 0. Needs plain_seen > 0.
    double plain_at(double n, double token_ms) const;
  };
  /// Drafting rounds' decay for the catch-up share: about the last 50 count.
  static constexpr double kCatchUpKeep = 0.98;
  /// costs() without the catch-up share.
  PlanCosts usual_costs(int32_t sequences, int32_t token_budget) const;
  PlanCosts pooled(int32_t token_budget) const;
  /// The nearest bucket to `k` with plain and drafting rounds (of two as near, the
  /// larger), or null.
  const Bucket* nearest_drafting(size_t k) const;
  double token_ms(const Bucket& b, const PlanCosts& pooled) const;

  /// The last rounds of one sequence by draft length (a ring each), whole: at batch 1 a
  /// draft length is a window length, and what a round costs is read per length.
  struct OneLength {
    std::array<double, kOneKept> wall_ms{};
    size_t seen = 0;        // rounds of this length so far, the skipped ones included
    uint64_t last = 0;      // one_rounds_ at its last round
  };
  std::array<OneLength, kOneMaxGamma + 1> one_{};
  uint64_t one_rounds_ = 0;  // rounds of one sequence so far

  RecentLine draft_;   // draft_ms ~ fixed + per step * draft_steps (rounds that drafted)
  RecentLine verify_;  // verify_ms ~ base + per token * window_tokens
  std::array<Bucket, kBuckets> buckets_;
};

}  // namespace specpipe
