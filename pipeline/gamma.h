#pragma once
/// The draft length, called `gamma` end to end: the drafts one sequence's round verifies
/// (0 = a plain decode step). Its names, in order of precedence:
///   slots.drafter.max_gamma (YAML)  the most any request, plugin or round may use
///   slots.drafter.gamma (--gamma)   the pipeline's gamma, for requests that name none
///   `gamma` (request field)         one request's gamma (ZeroMQ and OpenAI protocols)
///   RoundItem::gamma                what the verify_plan slot gave a sequence this round,
///                                   at most its cap (PlanSequence::gamma_cap: max_gamma,
///                                   less near the end of the model's positions)
/// The plugin ABI keeps its field names (include/specpipe/plugin.h): model_desc.max_gamma
/// is slots.drafter.max_gamma, plan_sequence.requested_gamma the request's gamma and
/// plan_sequence.max_gamma the round's cap.
///
/// Where gamma is checked: once at pipeline load against what the models can run
/// (check_gamma_config), once per request against max_gamma (the scheduler's
/// validation: a refusal, the server keeps serving). The readers (YAML, command line,
/// protocols) only check that a value is a non-negative integer.
#include <cstdint>
#include <optional>
#include <string>

#include "pipeline/pipeline_config.h"

namespace specpipe {

class ForwardModel;

/// The layout of one sequence's verify window: the recomputed tokens (decided tokens
/// whose K/V the last commit could not keep), the pending token, then the judged chain:
/// provisional tokens (SpecPV) and the round's drafts. The one place that knows it.
struct WindowLayout {
  int32_t recompute = 0;
  int32_t provisional = 0;
  int32_t drafts = 0;

  /// Tokens of the window (rows of its forward).
  int32_t size() const { return recompute + 1 + provisional + drafts; }
  /// Row of the pending token's logits: where the verdict starts.
  int32_t verdict_row() const { return recompute; }
  /// Tokens the KV keeps after `accepted` of the chain (provisional + drafts) pass.
  int32_t committed(int32_t accepted) const { return recompute + 1 + accepted; }
};

/// The largest window a round plans for one sequence at gamma `g`: a recomputed token,
/// the pending token and g drafts (provisional tokens replace drafts, SpecPV's views
/// plugin keeps them within the same budget).
inline int32_t largest_window(int32_t g) { return WindowLayout{1, 0, g}.size(); }

/// What the opened models allow for gamma, with the reason in words.
struct GammaLimits {
  int32_t max_gamma = 0;          ///< the largest slots.drafter.max_gamma the models take
  std::string why;                ///< e.g. "32 sequences x (max_gamma + 2) tokens must fit ..."
  int32_t max_chain_steps = 0;    ///< the draft model's longest chain without host steps (0: no draft model)
};

/// The limits of `target` (and `draft`, null for the n-gram drafter) for rounds of up
/// to `max_batch` sequences: every sequence's largest window in one target forward
/// (ForwardModel::max_forward_tokens) and inside both models' positions.
GammaLimits gamma_limits(const ForwardModel& target, const ForwardModel* draft, int32_t max_batch);

/// A drafter section that cannot run: the key at fault (under slots.drafter) and why.
struct GammaProblem {
  std::string key;
  std::string reason;
};

/// The config-load check of a drafter section against itself (gamma <= max_gamma) and,
/// when given, the models' limits (max_gamma <= limits->max_gamma). The YAML reader
/// calls it without limits (the models are not open yet), load_pipeline with them.
std::optional<GammaProblem> gamma_config_problem(const DrafterConfig& drafter, const GammaLimits* limits);

/// gamma_config_problem as an Error(invalid_argument) "slots.drafter.KEY: REASON".
/// With a draft model whose chain limit is below max_gamma + 1 (a draft-ahead chain),
/// logs that longer chains run step by step from the host (slower, the same tokens).
void check_gamma_config(const DrafterConfig& drafter, const GammaLimits& limits);

}  // namespace specpipe
