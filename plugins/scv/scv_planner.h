#pragma once
/// The planning math of SCV, free of the C ABI and of any state: given each sequence's
/// acceptance estimate and gamma cap and the measured costs of one round, choose the
/// gammas that maximise the batch's expected tokens per millisecond.
///
/// The model (README.md, "The model"): each draft is accepted independently with the
/// sequence's probability a, so a window with g drafts yields E(g) = 1 + a + ... + a^g
/// tokens; a round with largest gamma G costs
///     (G > 0 ? draft_base_ms : 0) + G * draft_step_ms + verify_base_ms
///     + verify_token_ms * sum_i (1 + g_i).
#include <cstdint>
#include <span>
#include <vector>

namespace specpipe::scv {

/// Measured costs of one round, in milliseconds (the host's running averages).
struct RoundCosts {
  double draft_step_ms = 0;   ///< one draft step for the whole batch
  double verify_base_ms = 0;  ///< a verify forward at zero window tokens (intercept)
  double verify_token_ms = 0; ///< each window token's extra cost (slope)
  int32_t token_budget = 0;   ///< most window tokens per verify pass; 0 = unlimited
  double draft_base_ms = 0;   ///< paid once by a round in which any sequence drafts
  /// A batch of one sequence: the measured cost of a round that drafted g tokens, [g] for
  /// g = 0 up, 0 where not measured; empty if none (the host's ABI 1.3 field).
  std::vector<double> round_ms_by_gamma;

  /// The verify side is what makes a round cost anything: with both verify terms at 0
  /// the host has not measured yet and the ratio is meaningless.
  bool measured() const { return verify_base_ms > 0 || verify_token_ms > 0; }
};

/// One sequence as the planner sees it.
struct WindowRequest {
  double acceptance = 0;  ///< per-draft acceptance probability, clamped to [0, 1]
  int32_t cap = 0;        ///< most drafts it may get this round (>= 0)
  int32_t requested = 0;  ///< the gamma to use while costs are unmeasured
};

struct PlannerOptions {
  /// Relative improvement a step must bring: a draft is added only if the tokens it adds
  /// per millisecond exceed the round's current rate by this factor, and a larger G (one
  /// more draft step for the batch) replaces a smaller one only if the round's rate
  /// improves by it. Guards against flip-flopping on noisy estimates.
  double min_gain = 0.01;
  /// The last round's largest gamma (-1: none). Another G replaces it only if the round's
  /// rate improves by switch_gain over it: a drafter's work carried between rounds (a
  /// device's draft-ahead chain, captured graphs) is made for one draft length.
  int32_t previous_max_gamma = -1;
  double switch_gain = 0;
  /// The same for one sequence planned by its measured rounds (RoundCosts::
  /// round_ms_by_gamma): there a change also misses the draft-ahead chain and may bring
  /// new shapes, and one sequence's acceptance estimate swings the optimum from round to
  /// round.
  double single_switch_gain = 0;
  /// One sequence planned by its measured rounds: keep previous_max_gamma (within the cap)
  /// whatever the estimates say. The instance sets it while a gamma it chose has not been
  /// held long enough for the host to measure it (ScvConfig::measure_rounds): a length's
  /// first rounds on a device are slow (eager, then a graph capture) and tilt the line
  /// back before the host gives the length's own rounds.
  bool hold_previous = false;
  /// Before the search over G (which sorts every window's drafts: 30-49 us a round at 128
  /// sequences on the CI VM, bench/scv_plan_bench, on the scheduler's critical path), an
  /// O(n x cap) bound on what any G could reach ends it at 0 for all where none could beat
  /// plain. The same plan either way; false always searches (tests compare the two).
  bool bound_first = true;
};

/// The chosen gammas and what the model predicts for them.
struct RoundPlan {
  std::vector<int32_t> gamma;        ///< [n], gamma[i] in [0, cap_i]
  bool measured = false;             ///< false: requested gammas (costs not measured)
  bool budget_exceeded = false;      ///< even gamma 0 for all is over token_budget
  double expected_tokens = 0;        ///< sum_i E_i(gamma_i)
  double cost_ms = 0;                ///< the round's modelled cost (0 when unmeasured)
  double plain_tokens_per_ms = 0;    ///< the same batch with gamma 0 for all
  double tokens_per_ms() const { return cost_ms > 0 ? expected_tokens / cost_ms : 0; }
};

/// Whether plan_round's search could choose some G >= 1 over gamma 0 for all (a better
/// rate by min_gain, or the previous round's G kept by switch_gain), by a bound on each
/// G's rate in O(n x cap): false means the search ends at 0 for all
/// (PlannerOptions::bound_first).
bool some_level_could_win(std::span<const WindowRequest> windows, const RoundCosts& costs,
                          const PlannerOptions& options);

/// E(g) = sum_{l=0..g} a^l: the expected tokens of a window with g drafts (g + 1 when
/// a = 1, 1 when a = 0).
double expected_tokens(double acceptance, int32_t gamma);

/// The modelled cost of a round with these gammas (for one sequence with round_ms_by_gamma:
/// its measured cost, see plan_round).
double round_cost_ms(const RoundCosts& costs, std::span<const int32_t> gamma);

/// Whether one sequence now planned at 0 with cap `cap` could raise the planned round's
/// tokens per ms by drafting if every draft were accepted and drafting cost half what the
/// costs say (they may be stale): the test a probe must pass to be worth its cost (at a
/// large batch on a device no acceptance pays for drafting, and a probe there only slows
/// the round).
bool drafting_could_pay(const RoundCosts& costs, const RoundPlan& plan, int32_t cap);

/// Plans one round.
///  - Unmeasured costs: gamma_i = clamp(requested_i, 0, cap_i), trimmed to the budget by
///    lowering the largest gammas first.
///  - Measured: for every G in [0, max cap] the best gammas with max <= G are found
///    exactly (drafts ranked by their marginal value a_i^l, added while each beats the
///    round's current tokens/ms; see scv_planner.cpp), and the best G wins (the previous
///    round's G unless another beats it by switch_gain).
///  - One sequence with measured round costs by gamma (round_ms_by_gamma): each gamma's
///    tokens per ms from its measured round where there is one, else from the line moved
///    by the nearest measured gamma's difference from it; the best wins, with the same
///    min_gain and switch_gain.
///  - token_budget: sum_i (1 + gamma_i) <= token_budget. If n windows alone exceed it,
///    every gamma is 0 and budget_exceeded is set: the host still runs the round.
RoundPlan plan_round(std::span<const WindowRequest> windows, const RoundCosts& costs,
                     const PlannerOptions& options = {});

}  // namespace specpipe::scv
