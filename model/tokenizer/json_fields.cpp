#include "model/tokenizer/json_fields.h"

#include "core/error.h"

namespace specpipe::tokenizer {

std::string member_path(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

std::string element_path(std::string_view path, size_t index) {
  return fmt::format("{}[{}]", path, index);
}

std::string describe(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

void fail_unsupported(std::string_view path, const Json& value, std::string_view supported) {
  fail(ErrorCode::unsupported, "{} '{}' is not supported (supported: {})", path, describe(value),
       supported);
}

void fail_malformed(std::string_view path, std::string_view what) {
  fail(ErrorCode::corrupt_file, "{} {}", path, what);
}

const Json* find_member(const Json& node, std::string_view key) {
  if (!node.is_object()) return nullptr;
  const auto it = node.find(key);
  return it == node.end() ? nullptr : &*it;
}

bool is_absent_or_null(const Json& node, std::string_view key) {
  const Json* member = find_member(node, key);
  return member == nullptr || member->is_null();
}

void require_object(const Json& node, std::string_view path) {
  if (!node.is_object()) fail_malformed(path, "must be a JSON object");
}

std::string require_string(const Json& node, std::string_view key, std::string_view path) {
  const Json* member = find_member(node, key);
  if (member == nullptr) fail_malformed(member_path(path, key), "is missing");
  if (!member->is_string()) fail_malformed(member_path(path, key), "must be a string");
  return member->get<std::string>();
}

bool optional_bool(const Json& node, std::string_view key, bool fallback, std::string_view path) {
  const Json* member = find_member(node, key);
  if (member == nullptr || member->is_null()) return fallback;
  if (!member->is_boolean()) fail_malformed(member_path(path, key), "must be true or false");
  return member->get<bool>();
}

void refuse_unless(const Json& node, std::string_view key, const Json& accepted,
                   std::string_view path, std::string_view supported) {
  const Json* member = find_member(node, key);
  if (member == nullptr || member->is_null() || *member == accepted) return;
  fail_unsupported(member_path(path, key), *member, supported);
}

}  // namespace specpipe::tokenizer
