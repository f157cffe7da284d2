#include "scv_instance.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <limits>

#include "scv_errors.h"

namespace specpipe::scv {
namespace {

/// A field is present when the caller's struct_size covers all of it.
template <typename T>
bool has_field(uint32_t struct_size, size_t offset) {
  return struct_size >= offset + sizeof(T);
}

double non_negative_cost(double ms, const char* name) {
  if (!std::isfinite(ms)) throw invalid_argument(std::string("scv: plan: costs.") + name + " is not finite");
  return ms > 0 ? ms : 0;
}

}  // namespace

RoundCosts costs_from_abi(const specpipe_plan_costs& c) {
  RoundCosts out;
  if (has_field<double>(c.struct_size, offsetof(specpipe_plan_costs, draft_step_ms)))
    out.draft_step_ms = non_negative_cost(c.draft_step_ms, "draft_step_ms");
  if (has_field<double>(c.struct_size, offsetof(specpipe_plan_costs, verify_base_ms)))
    out.verify_base_ms = non_negative_cost(c.verify_base_ms, "verify_base_ms");
  if (has_field<double>(c.struct_size, offsetof(specpipe_plan_costs, verify_token_ms)))
    out.verify_token_ms = non_negative_cost(c.verify_token_ms, "verify_token_ms");
  if (has_field<int32_t>(c.struct_size, offsetof(specpipe_plan_costs, token_budget))) {
    if (c.token_budget < 0)
      throw invalid_argument("scv: plan: costs.token_budget " + std::to_string(c.token_budget) + " < 0");
    out.token_budget = c.token_budget;
  }
  if (has_field<double>(c.struct_size, offsetof(specpipe_plan_costs, draft_base_ms)))
    out.draft_base_ms = non_negative_cost(c.draft_base_ms, "draft_base_ms");
  if (has_field<int32_t>(c.struct_size, offsetof(specpipe_plan_costs, round_ms_by_gamma_count))) {
    // A round's cost per gamma is bounded by the gammas a plan can have (the ABI's 0..1024).
    constexpr int32_t kMaxCount = 1025;
    const int32_t count = c.round_ms_by_gamma_count;
    if (count < 0 || count > kMaxCount || (count > 0 && !c.round_ms_by_gamma))
      throw invalid_argument("scv: plan: costs.round_ms_by_gamma_count " + std::to_string(count) +
                             (count > 0 && !c.round_ms_by_gamma ? " with a NULL round_ms_by_gamma" : " out of [0, 1025]"));
    for (int32_t g = 0; g < count; ++g)
      out.round_ms_by_gamma.push_back(non_negative_cost(c.round_ms_by_gamma[g], "round_ms_by_gamma"));
  }
  return out;
}

ScvInstance::ScvInstance(const ScvConfig& config, const specpipe_host_api* host)
    : config_(config),
      host_(host),
      tracker_(TrackerOptions{config.prior_acceptance, config.prior_weight, config.memory_rounds}),
      counters_(config.max_gamma) {}

void ScvInstance::log(int32_t level, const std::string& message) const {
  if (!host_ || !has_field<void (*)()>(host_->struct_size, offsetof(specpipe_host_api, log)) || !host_->log) return;
  host_->log(host_->host, level, message.c_str());
}

void ScvInstance::plan(std::span<const specpipe_plan_sequence> sequences, const RoundCosts& given,
                       std::span<int32_t> gamma) {
  RoundCosts costs = given;
  if (!config_.costs_by_gamma) costs.round_ms_by_gamma.clear();
  for (size_t i = 0; i < sequences.size(); ++i)
    if (sequences[i].max_gamma < 0)
      throw invalid_argument("scv: plan: sequences[" + std::to_string(i) + "] (sequence " +
                             std::to_string(sequences[i].sequence) + "): max_gamma " +
                             std::to_string(sequences[i].max_gamma) + " < 0");
  if (gamma.size() != sequences.size()) throw invalid_argument("scv: plan: gamma and sequences differ in length");
  if (sequences.empty()) return;
  ++round_;

  windows_.resize(sequences.size());
  for (size_t i = 0; i < sequences.size(); ++i)
    windows_[i] = WindowRequest{tracker_.estimate(sequences[i].sequence),
                                std::min(sequences[i].max_gamma, config_.max_gamma),
                                sequences[i].requested_gamma};
  // One sequence by its measured rounds: a gamma chosen that the host has not measured yet
  // is kept for up to measure_rounds rounds (the host gives a length's rounds once it has
  // seen 11 of them), or its first, slow rounds tilt the line back before it is measured
  // (on an H100 SCV held gamma 2 where 4 was best, never measuring 3-5).
  const int32_t previous = previous_max_gamma_;
  const auto& by_gamma = costs.round_ms_by_gamma;
  const bool hold = sequences.size() == 1 && !by_gamma.empty() && config_.measure_rounds > 0 && previous > 0 &&
                    held_rounds_ < config_.measure_rounds &&
                    !(previous < static_cast<int32_t>(by_gamma.size()) && by_gamma[previous] > 0);
  RoundPlan plan = plan_round(windows_, costs, PlannerOptions{config_.min_gain, previous, config_.switch_gain,
                                                                   config_.single_switch_gain, hold});
  // The planned largest gamma, probes aside: what the next round's hysteresis keeps.
  const int32_t planned_max = *std::max_element(plan.gamma.begin(), plan.gamma.end());
  if (hold && planned_max == previous) ++counters_.measure_hold_rounds;
  held_rounds_ = planned_max == previous ? held_rounds_ + 1 : 1;
  previous_max_gamma_ = planned_max;
  if (previous_max_gamma_ != previous || round_ % 1024 == 0) trace(sequences, costs, plan, previous);

  // Exploration: a sequence the model keeps at 0 would never produce new evidence, so
  // after probe_interval such rounds it drafts one token for probe_rounds rounds in a row
  // (within the budget), where drafting could pay at all: if every draft would be
  // accepted. A probe's first round carries the drafter's catch-up on the tokens decided
  // while it was off, which a host leaves out of what drafting costs; its later rounds
  // are what refreshes that cost, which otherwise stays whatever it was when the
  // sequence turned off.
  int64_t spare_tokens = std::numeric_limits<int64_t>::max();
  if (costs.token_budget > 0) {
    spare_tokens = costs.token_budget;
    for (int32_t g : plan.gamma) spare_tokens -= 1 + g;
  }
  const bool may_probe = plan.measured && !plan.budget_exceeded;
  // From probe_backoff_batch up a probe is dear (a drafting round for the whole batch, its
  // first round the draft model's catch-up on each probed sequence's context): after one
  // that did not turn drafting on, no new probe starts there for probe_interval x 2, 4,
  // ... 16 rounds; one that does, or the plan drafting by itself, resets the wait.
  ProbeBackoff* backoff = may_probe ? backoff_for(sequences.size()) : nullptr;
  if (backoff && planned_max > 0) *backoff = ProbeBackoff{};
  bool probe_lost = false;
  states_now_.resize(sequences.size());
  due_.clear();
  for (size_t i = 0; i < sequences.size(); ++i) {
    SequenceState& state = states_[sequences[i].sequence];  // references survive rehashing
    states_now_[i] = &state;
    state.last_round = round_;
    if (plan.gamma[i] > 0 || !may_probe || windows_[i].cap < 1) {
      if (plan.gamma[i] > 0) {
        state.rounds_off = 0;
        state.probed = false;
      }
      state.probe_left = 0;
    } else if (state.probe_left > 0) {
      due_.push_back(i);  // a probe under way goes on
    } else {
      // A probe that ended with the plan still at 0 lost.
      probe_lost = probe_lost || state.probed;
      state.probed = false;
      if (++state.rounds_off >= config_.probe_interval) {
        if (!drafting_could_pay(costs, plan, windows_[i].cap)) ++counters_.probes_skipped;
        else if (backoff && round_ < backoff->hold_until) ++counters_.probes_held;
        else due_.push_back(i);
      }
    }
  }
  if (backoff && probe_lost) {  // once a round, however many sequences' probes ended in it
    backoff->lost = std::min(backoff->lost + 1, kMaxProbeBackoff);
    backoff->hold_until = round_ + (static_cast<uint64_t>(config_.probe_interval) << backoff->lost);
    ++counters_.probes_lost;
  }
  // Under a tight budget probes under way go first, then the longest-waiting, so none
  // starves.
  const auto waited = [&](size_t i) {
    return states_now_[i]->probe_left > 0 ? std::numeric_limits<int32_t>::max() : states_now_[i]->rounds_off;
  };
  std::stable_sort(due_.begin(), due_.end(), [&](size_t x, size_t y) { return waited(x) > waited(y); });
  for (size_t i : due_) {
    SequenceState& state = *states_now_[i];
    if (spare_tokens <= 0) {
      state.probe_left = 0;  // cut short: the next probe starts afresh
      continue;
    }
    plan.gamma[i] = 1;
    --spare_tokens;
    state.probe_left = state.probe_left > 0 ? state.probe_left - 1 : config_.probe_rounds - 1;
    state.rounds_off = 0;
    state.probed = true;
    ++counters_.probes;
  }
  for (size_t i = 0; i < sequences.size(); ++i) states_now_[i]->last_gamma = plan.gamma[i];

  counters_.record_round(plan.gamma);
  const bool probed = std::any_of(due_.begin(), due_.end(), [&](size_t i) { return plan.gamma[i] > 0; });
  if (planned_max > 0 || probed) ++counters_.drafting_rounds;
  if (probed) ++counters_.probe_rounds;
  if (probed && planned_max == 0) ++counters_.probe_only_rounds;
  if (!plan.measured) ++counters_.unmeasured_rounds;
  if (plan.budget_exceeded) ++counters_.budget_exceeded_rounds;
  if (plan.measured && plan.plain_tokens_per_ms > 0) {
    double tokens = 0;
    for (size_t i = 0; i < sequences.size(); ++i) tokens += expected_tokens(windows_[i].acceptance, plan.gamma[i]);
    counters_.predicted_speedup_sum += tokens / round_cost_ms(costs, plan.gamma) / plan.plain_tokens_per_ms;
    ++counters_.predicted_rounds;
    const bool speculating = *std::max_element(plan.gamma.begin(), plan.gamma.end()) > 0;
    if (speculating != speculating_)
      log(0, std::string("scv: speculation ") + (speculating ? "on" : "off") + " at batch " +
                 std::to_string(sequences.size()) + " (round " + std::to_string(round_) + ")");
    speculating_ = speculating;
  }
  std::copy(plan.gamma.begin(), plan.gamma.end(), gamma.begin());
  if (round_ % 1024 == 0) evict_stale();
}

ScvInstance::ProbeBackoff* ScvInstance::backoff_for(size_t n) {
  if (config_.probe_backoff_batch <= 0 || n < static_cast<size_t>(config_.probe_backoff_batch)) return nullptr;
  return &backoff_[std::min<size_t>(std::bit_width(n - 1), kBackoffBuckets - 1)];
}

void ScvInstance::trace(std::span<const specpipe_plan_sequence> sequences, const RoundCosts& costs,
                        const RoundPlan& plan, int32_t previous) const {
  if (!host_) return;
  double acceptance = 0;
  for (const WindowRequest& w : windows_) acceptance += w.acceptance;
  acceptance /= static_cast<double>(windows_.size());
  char line[320];
  std::snprintf(line, sizeof line,
                "scv: round %llu batch %zu: largest gamma %d (was %d)%s; costs step %.4f base %.4f verify %.4f + "
                "%.5f/token ms; tokens/ms planned %.3f, plain %.3f; mean acceptance %.3f",
                static_cast<unsigned long long>(round_), sequences.size(),
                *std::max_element(plan.gamma.begin(), plan.gamma.end()), previous,
                plan.measured ? "" : " (costs unmeasured)", costs.draft_step_ms, costs.draft_base_ms,
                costs.verify_base_ms, costs.verify_token_ms, plan.tokens_per_ms(), plan.plain_tokens_per_ms,
                acceptance);
  std::string text = line;
  // One sequence: the measured round by gamma (0 = not measured).
  for (size_t g = 0; g < costs.round_ms_by_gamma.size(); ++g) {
    std::snprintf(line, sizeof line, "%s%.3f", g == 0 ? "; round ms by gamma " : " ", costs.round_ms_by_gamma[g]);
    text += line;
  }
  log(0, text);
}

void ScvInstance::observe(std::span<const specpipe_plan_observation> observations) {
  std::vector<DraftOutcome> outcomes;
  outcomes.reserve(observations.size());
  for (const specpipe_plan_observation& o : observations) {
    outcomes.push_back({o.sequence, o.proposed, o.accepted});
    states_[o.sequence].last_round = round_;
  }
  tracker_.observe(outcomes);
  counters_.outcomes_observed += observations.size();
}

void ScvInstance::forget(int64_t sequence) {
  states_.erase(sequence);
  tracker_.forget(sequence);
}

void ScvInstance::evict_stale() {
  for (auto it = states_.begin(); it != states_.end();) {
    if (it->second.last_round + kStaleRounds < round_) {
      tracker_.forget(it->first);
      it = states_.erase(it);
    } else {
      ++it;
    }
  }
}

std::string ScvInstance::metrics_json() const {
  LiveMetrics live;
  for (const auto& entry : states_)
    if (entry.second.last_gamma == 0) ++live.speculation_off_sequences_now;
  live.tracked_sequences = static_cast<int64_t>(states_.size());
  live.mean_acceptance_estimate = tracker_.mean_estimate();
  live.batch_acceptance_estimate = tracker_.batch_estimate();
  return scv::metrics_json(counters_, live);
}

}  // namespace specpipe::scv
