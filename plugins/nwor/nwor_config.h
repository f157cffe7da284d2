#pragma once
/// The NWOR plugin's config block (plugins/nwor/README.md), parsed once at create()
/// into a validated struct; nothing else reads the JSON text.
#include <cstdint>

#include "specpipe/plugin.h"

namespace nwor {

struct NworConfig {
  /// Rows of the staging buffer per layer: the most window tokens one round may stage.
  int64_t max_rows = 0;
  /// false: every round is declined (`disabled`) and no buffer is allocated.
  bool enabled = true;
};

/// Parses `json_text` (a JSON object; NULL or empty text = all defaults). `max_rows`
/// defaults to (model.max_gamma + 2) * model.max_batch (the longest window). Throws
/// HookError with SPECPIPE_ERR_CONFIG and a message naming the key for an unknown key or a bad value.
NworConfig parse_config(const char* json_text, const specpipe_model_desc& model);

}  // namespace nwor
