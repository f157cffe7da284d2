#include "nwor_metrics.h"

#include <nlohmann/json.hpp>

namespace nwor {

const char* fallback_name(Fallback reason) {
  switch (reason) {
    case Fallback::window_too_large: return "window_too_large";
    case Fallback::buffer_busy: return "buffer_busy";
    case Fallback::disabled: return "disabled";
    case Fallback::commit_failed: return "commit_failed";
    case Fallback::stage_failed: return "stage_failed";
    case Fallback::count_: break;
  }
  return "unknown";
}

std::string NworMetrics::to_json(int64_t max_rows, bool enabled) const {
  nlohmann::ordered_json out;
  out["rounds_staged"] = rounds_staged;
  out["rounds_declined"] = rounds_declined;
  out["rounds_committed"] = rounds_committed;
  out["rounds_aborted"] = rounds_aborted;
  out["stage_operations"] = stage_operations;
  out["unique_staged_tokens"] = unique_staged_tokens;
  out["committed_tokens"] = committed_tokens;
  out["rejected_tokens"] = rejected_tokens;
  out["write_slots_calls"] = write_slots_calls;
  out["pool_bytes_written"] = pool_bytes_written;
  out["pool_bytes_not_written"] = pool_bytes_not_written;
  nlohmann::ordered_json reasons = nlohmann::ordered_json::object();
  for (int i = 0; i < static_cast<int>(Fallback::count_); ++i) reasons[fallback_name(static_cast<Fallback>(i))] = fallbacks[i];
  out["fallbacks"] = std::move(reasons);
  out["enabled"] = enabled;
  out["max_rows"] = max_rows;
  return out.dump();
}

}  // namespace nwor
