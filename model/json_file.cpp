#include "model/json_file.h"

#include <fstream>
#include <string>
#include <system_error>

#include "core/error.h"

namespace specpipe {

nlohmann::json read_json_object_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    if (std::filesystem::exists(path, ec))
      fail(ErrorCode::io, "{}: not a regular file", path.string());
    fail(ErrorCode::not_found, "{}: no such file", path.string());
  }
  const auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) fail(ErrorCode::io, "{}: cannot open for reading", path.string());
  std::string text(static_cast<size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (static_cast<uintmax_t>(in.gcount()) != size)
    fail(ErrorCode::io, "{}: read error", path.string());

  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::corrupt_file, "{}: malformed JSON: {}", path.string(), e.what());
  }
  if (!parsed.is_object())
    fail(ErrorCode::corrupt_file, "{}: top-level JSON value is {}, object expected", path.string(),
         json_type_name(parsed));
  return parsed;
}

const char* json_type_name(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "number";
  return value.type_name();  // "null", "boolean", "string", "array", "object", ...
}

std::string json_preview(const nlohmann::json& value) {
  constexpr size_t kMaxChars = 60;
  if (value.is_array() || value.is_object()) return std::string("<") + value.type_name() + ">";
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

}  // namespace specpipe
