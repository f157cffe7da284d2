#pragma once
/// Reading a small JSON file (config.json, an index, generation_config.json) with errors
/// that name the file. Internal to model/.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

namespace specpipe {

/// Reads and parses `path`. Throws Error(not_found) if it does not exist, Error(io) if it
/// cannot be read, Error(corrupt_file) if it is not well-formed JSON or not an object.
nlohmann::json read_json_object_file(const std::filesystem::path& path);

/// The JSON type name of `value` for messages ("string", "integer", "object", ...).
const char* json_type_name(const nlohmann::json& value);

/// A short rendering of `value` for an error message: scalars as JSON (long strings cut),
/// containers by type only. Never recurses, so hostile nesting cannot exhaust the stack.
std::string json_preview(const nlohmann::json& value);

}  // namespace specpipe
