#pragma once
/// The NWOR plugin's counters (plugins/nwor/README.md lists their meaning), reported by
/// describe_metrics as one JSON object.
#include <cstdint>
#include <string>

namespace nwor {

/// Why a round did not go through the staging buffer; each is one key of "fallbacks".
enum class Fallback { window_too_large, buffer_busy, disabled, commit_failed, stage_failed, count_ };

struct NworMetrics {
  int64_t rounds_staged = 0;    ///< begin() accepted the round
  int64_t rounds_declined = 0;  ///< begin() returned DECLINED (window_too_large, buffer_busy, disabled)
  int64_t rounds_committed = 0;
  int64_t rounds_aborted = 0;
  /// layer x token rows copied in: each stage() adds the round's rows.
  int64_t stage_operations = 0;
  /// distinct tokens staged: a token counts once however many layers stage it.
  int64_t unique_staged_tokens = 0;
  int64_t committed_tokens = 0;  ///< accepted tokens of successful commits
  int64_t rejected_tokens = 0;   ///< staged but not accepted, in successful commits
  int64_t write_slots_calls = 0; ///< successful host->write_slots calls
  int64_t pool_bytes_written = 0;      ///< K+V bytes the successful write_slots calls wrote
  int64_t pool_bytes_not_written = 0;  ///< K+V bytes of rejected tokens, all layers
  int64_t fallbacks[static_cast<int>(Fallback::count_)] = {};

  void count(Fallback reason) { ++fallbacks[static_cast<int>(reason)]; }
  int64_t fallback(Fallback reason) const { return fallbacks[static_cast<int>(reason)]; }
  /// The counters as a JSON object, keys in a fixed order.
  std::string to_json(int64_t max_rows, bool enabled) const;
};

/// The JSON key of a fallback reason ("window_too_large", ...).
const char* fallback_name(Fallback reason);

}  // namespace nwor
