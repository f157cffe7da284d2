#pragma once
/// Typed reads of tokenizer.json with errors that name the JSON path at fault, e.g.
/// "normalizer.type 'Lowercase' is not supported (supported: NFC, Sequence)".
/// Tokenizer::from_file prefixes these messages with the file's path.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace specpipe::tokenizer {

using Json = nlohmann::json;

/// "a.b" from ("a", "b"); just "b" when `path` is empty.
std::string member_path(std::string_view path, std::string_view key);
/// "a[3]" from ("a", 3).
std::string element_path(std::string_view path, size_t index);

/// A value as it should appear in a message: strings bare, anything else as JSON.
std::string describe(const Json& value);

/// Throws Error(unsupported): "<path> '<value>' is not supported (supported: ...)".
[[noreturn]] void fail_unsupported(std::string_view path, const Json& value,
                                   std::string_view supported);
/// Throws Error(corrupt_file): "<path> <what>", for values of the wrong shape.
[[noreturn]] void fail_malformed(std::string_view path, std::string_view what);

/// The member `key` of `node`, or nullptr when `node` is not an object or lacks it.
const Json* find_member(const Json& node, std::string_view key);
/// True when `key` is absent or null.
bool is_absent_or_null(const Json& node, std::string_view key);

/// Checks that `node` (found at `path`) is an object.
void require_object(const Json& node, std::string_view path);
/// The string member `key` of the object at `path`; it must exist.
std::string require_string(const Json& node, std::string_view key, std::string_view path);
/// The boolean member `key`, or `fallback` when absent or null.
bool optional_bool(const Json& node, std::string_view key, bool fallback, std::string_view path);
/// Refuses member `key` unless it is absent, null or equal to `accepted`
/// (described in the message as `supported`).
void refuse_unless(const Json& node, std::string_view key, const Json& accepted,
                   std::string_view path, std::string_view supported);

}  // namespace specpipe::tokenizer
