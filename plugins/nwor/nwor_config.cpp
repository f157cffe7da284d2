#include "nwor_config.h"

#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "nwor_error.h"

namespace nwor {
namespace {

[[noreturn]] void fail_config(const std::string& message) { throw HookError(SPECPIPE_ERR_CONFIG, "config: " + message); }

// Rows are counted in int32 at the ABI (specpipe_window::n); a larger buffer could not
// be addressed by one round anyway.
constexpr int64_t kMaxRowsLimit = std::numeric_limits<int32_t>::max();

int64_t read_max_rows(const nlohmann::json& value) {
  // Integers only: 2.0 or "8" are refused rather than converted, so a typo in a config
  // file is reported instead of silently meaning something else.
  if (!value.is_number_integer())
    fail_config("'max_rows' must be an integer > 0, got " + std::string(value.type_name()) + " " + value.dump());
  // nlohmann keeps non-negative literals as unsigned: compare in the signedness stored.
  const bool too_large = value.is_number_unsigned() ? value.get<uint64_t>() > static_cast<uint64_t>(kMaxRowsLimit)
                                                    : value.get<int64_t>() > kMaxRowsLimit;
  if (too_large) fail_config("'max_rows' must be at most " + std::to_string(kMaxRowsLimit) + ", got " + value.dump());
  const int64_t rows = value.get<int64_t>();
  if (rows <= 0) fail_config("'max_rows' must be an integer > 0, got " + value.dump());
  return rows;
}

}  // namespace

NworConfig parse_config(const char* json_text, const specpipe_model_desc& model) {
  NworConfig config;
  bool max_rows_given = false;
  if (json_text && std::strlen(json_text) > 0) {
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(json_text);
    } catch (const nlohmann::json::parse_error& e) {
      fail_config(std::string("not valid JSON: ") + e.what());
    }
    if (root.is_null()) root = nlohmann::json::object();
    if (!root.is_object()) fail_config("must be a JSON object, got " + std::string(root.type_name()));
    for (const auto& [key, value] : root.items()) {
      if (key == "max_rows") {
        config.max_rows = read_max_rows(value);
        max_rows_given = true;
      } else if (key == "enabled") {
        if (!value.is_boolean()) fail_config("'enabled' must be true or false, got " + value.dump());
        config.enabled = value.get<bool>();
      } else {
        fail_config("unknown key '" + key + "' (known: max_rows, enabled)");
      }
    }
  }
  if (!max_rows_given) {
    // The largest round the host can run: every sequence of a full batch with the
    // longest window (pipeline/gamma.h, largest_window): max_gamma drafts, the pending
    // token and the token recomputed after a failed commit. One row short per sequence
    // would not corrupt anything, but such a round would fall back (window_too_large).
    const int64_t rows = (static_cast<int64_t>(model.max_gamma) + 2) * model.max_batch;
    if (rows <= 0 || rows > kMaxRowsLimit)
      fail_config("'max_rows' has no usable default from the model (max_gamma " + std::to_string(model.max_gamma) +
                  ", max_batch " + std::to_string(model.max_batch) + "); set it explicitly");
    config.max_rows = rows;
  }
  return config;
}

}  // namespace nwor
