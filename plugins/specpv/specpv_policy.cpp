#include "specpv_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace specpv {

specpipe_view_decision SpecpvPolicy::decide(const specpipe_view_sequence& s) {
  specpipe_view_decision d{SPECPIPE_VIEW_FULL, 0, c_.approximate ? 1 : 0, c_.sink_tokens, c_.retrieval_blocks(),
                           c_.window_tokens, c_.buffer_tokens};
  const int64_t since_full = int64_t{s.context_length} - s.verified_length + s.window;
  const auto own = c_.adaptive_interval ? interval_.find(s.sequence) : interval_.end();
  const int32_t interval = own == interval_.end() ? c_.refresh_interval : own->second;
  if (s.sampled) {
    ++full_;
  } else if (int64_t{s.context_length} + s.window <= c_.budget()) {
    ++full_;  // the whole context fits the budget: nothing to save
    ++short_context_;
  } else if (!s.retrieval_ready || s.rounds_since_full >= interval || since_full > c_.buffer_tokens) {
    if (s.retrieval_ready && s.rounds_since_full < c_.refresh_interval && since_full <= c_.buffer_tokens) ++early_full_;
    d.refresh = c_.by_mass ? SPECPIPE_REFRESH_BY_MASS : 1;
    ++full_;
    ++refreshes_;
  } else {
    d.view = SPECPIPE_VIEW_PARTIAL;
    ++partial_;
  }
  return d;
}

void SpecpvPolicy::observe(std::span<const specpipe_view_observation> observations) {
  for (const specpipe_view_observation& o : observations) {
    if (o.view == SPECPIPE_VIEW_PARTIAL) {
      partial_proposed_ += o.proposed;
      partial_accepted_ += o.accepted;
    } else {
      full_proposed_ += o.proposed;
      full_accepted_ += o.accepted;
      rollbacks_ += o.rolled_back > 0 ? 1 : 0;
      rolled_back_tokens_ += o.rolled_back;
      if (c_.adaptive_interval) {
        int32_t& k = interval_.try_emplace(o.sequence, c_.refresh_interval).first->second;
        if (o.rolled_back > 0 && k > 1) ++interval_cuts_;
        k = o.rolled_back > 0 ? std::max(1, k / 2) : std::min(c_.refresh_interval, k * 2);
      }
    }
  }
}

std::string SpecpvPolicy::metrics_json() const {
  const nlohmann::json j = {
      {"mode", c_.approximate ? "approximate" : "exact"},
      {"lossless", !c_.approximate},
      {"retrieval_by", c_.by_mass ? "attention_mass" : "quest"},
      {"budget_tokens", c_.budget()},
      {"partial_decisions", partial_},
      {"full_decisions", full_},
      {"refreshes", refreshes_},
      {"short_context_decisions", short_context_},
      {"partial_proposed", partial_proposed_},
      {"partial_accepted", partial_accepted_},
      {"full_proposed", full_proposed_},
      {"full_accepted", full_accepted_},
      {"rollbacks", rollbacks_},
      {"rolled_back_tokens", rolled_back_tokens_},
      {"adaptive_interval", c_.adaptive_interval},
      {"early_full_decisions", early_full_},
      {"interval_cuts", interval_cuts_},
  };
  return j.dump();
}

}  // namespace specpv
