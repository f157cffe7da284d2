#pragma once
/// Writing a PipelineConfig back out as YAML (the reading side is declared in
/// pipeline_config.h).
#include <string>

#include "pipeline/pipeline_config.h"

namespace specpipe {

/// Every key of docs/CONFIG.md with its value, defaults included, in the layout
/// parse_pipeline_config reads: parsing the result gives `config` back. The slots that
/// have one built-in strategy so far (verify_plan, kv_write, acceptance) show it.
std::string pipeline_config_to_yaml(const PipelineConfig& config);

}  // namespace specpipe
