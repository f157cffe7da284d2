#pragma once
/// Access to tests/data/golden-public.json and golden-long.json (see docs/MODELS.md for
/// their provenance). Loaded once per process.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace specpipe::test {

const nlohmann::json& golden_public();
const nlohmann::json& golden_long();

inline std::vector<int32_t> ids(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

}  // namespace specpipe::test
