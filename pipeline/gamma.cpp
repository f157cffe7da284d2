#include "pipeline/gamma.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>

#include "core/error.h"
#include "model/forward_model.h"

namespace specpipe {

GammaLimits gamma_limits(const ForwardModel& target, const ForwardModel* draft, int32_t max_batch) {
  GammaLimits l;
  // A round's windows go to the target in one forward (the verifier does not split it).
  const int32_t batch = std::max(1, max_batch);
  const int64_t per_sequence = target.max_forward_tokens() / batch;
  const int64_t by_forward = per_sequence - largest_window(0);
  int32_t positions = target.config().max_position_embeddings;
  if (draft) positions = std::min(positions, draft->config().max_position_embeddings);
  const int64_t by_positions = int64_t{positions} - largest_window(0);
  if (by_forward < by_positions) {
    l.max_gamma = static_cast<int32_t>(std::max<int64_t>(0, by_forward));
    l.why = fmt::format("scheduler.max_batch {} x (max_gamma + 2) tokens must fit the {} tokens one forward of the "
                        "target takes on {}",
                        batch, target.max_forward_tokens(), target.device().to_string());
  } else {
    l.max_gamma = static_cast<int32_t>(std::clamp<int64_t>(by_positions, 0, INT32_MAX));
    l.why = fmt::format("a window of max_gamma + 2 tokens must fit the models' {} positions", positions);
  }
  l.max_chain_steps = draft ? draft->max_chain_steps() : 0;
  return l;
}

std::optional<GammaProblem> gamma_config_problem(const DrafterConfig& d, const GammaLimits* limits) {
  if (d.max_gamma < 0) return GammaProblem{"max_gamma", fmt::format("{} must not be negative", d.max_gamma)};
  if (d.gamma < 0 || d.gamma > d.max_gamma)
    return GammaProblem{"gamma", fmt::format("{} is out of range [0, {}] (max_gamma)", d.gamma, d.max_gamma)};
  if (limits && d.max_gamma > limits->max_gamma)
    return GammaProblem{"max_gamma", fmt::format("{} exceeds the {} the models allow: {}", d.max_gamma,
                                                 limits->max_gamma, limits->why)};
  return std::nullopt;
}

void check_gamma_config(const DrafterConfig& d, const GammaLimits& limits) {
  if (auto p = gamma_config_problem(d, &limits))
    fail(ErrorCode::invalid_argument, "slots.drafter.{}: {}", p->key, p->reason);
  // A draft-ahead chain is gamma + 1 steps (model_drafter.h).
  if (limits.max_chain_steps > 0 && d.max_gamma + 1 > limits.max_chain_steps)
    spdlog::info("slots.drafter.max_gamma {}: draft chains of more than {} steps (gamma > {}) run step by step "
                 "from the host",
                 d.max_gamma, limits.max_chain_steps, limits.max_chain_steps - 1);
}

}  // namespace specpipe
