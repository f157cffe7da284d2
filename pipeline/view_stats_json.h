#pragma once
/// SpecPV's per-request counters (ViewStats) as JSON, for `specpipe bench` rows and the
/// endpoint's statistics. "mode" labels every number: "approximate" is not lossless.
#include <nlohmann/json.hpp>

#include "pipeline/spec_stats.h"

namespace specpipe {

inline double view_ratio(int64_t a, int64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

inline nlohmann::json view_stats_json(const ViewStats& v) {
  return {{"mode", v.mode()},
          {"partial_rounds", v.partial_rounds()},
          {"full_rounds", v.full_rounds},
          {"partial_acceptance", view_ratio(v.partial_accepted, v.partial_proposed)},
          {"full_acceptance", view_ratio(v.full_accepted, v.full_proposed)},
          {"rollbacks", v.rollbacks},
          {"rolled_back_tokens", v.rolled_back_tokens},
          {"refreshes", v.refreshes},
          {"forced_full", v.forced_full},
          {"partial_verify_ms", v.partial_verify_ms},
          {"full_verify_ms", v.full_verify_ms},
          // The host tier (offload): partial rounds read pool copies, never PCIe.
          {"host_tier",
           {{"partial_host_bytes", v.partial_host_bytes},
            {"full_host_bytes", v.full_host_bytes},
            {"view_copy_bytes", v.view_copy_bytes},
            {"view_host_blocks", v.view_host_blocks},
            {"view_dropped_blocks", v.view_dropped_blocks},
            {"view_copy_refusals", v.view_copy_refusals},
            {"host_fallbacks", v.host_fallbacks}}}};
}

}  // namespace specpipe
