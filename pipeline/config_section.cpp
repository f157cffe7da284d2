#include "pipeline/config_section.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace specpipe::config_yaml {
namespace {

/// How a node reads in a message: `a list`, `"lots"`.
std::string describe(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  if (node.IsNull()) return "nothing (null)";
  return fmt::format("\"{}\"", node.Scalar());
}

/// yaml-cpp tags a quoted scalar "!" and a plain one "?". "5" in quotes is a string, so
/// it is not read as a number or a boolean.
bool is_quoted(const YAML::Node& node) { return node.Tag() == "!"; }

/// [-+]?[0-9]+: decimal only, so 0x10, 1e3, 1_000 and 4.0 are not integers here.
bool is_decimal_integer(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// YAML's spellings of infinity and not-a-number: .inf, -.Inf, .NaN, ...
bool is_yaml_non_finite(std::string_view text) {
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) text.remove_prefix(1);
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  return lower == ".inf" || lower == ".nan";
}

std::string format_range(const RealRange& range) {
  const std::string hi = std::isinf(range.hi) ? "inf)" : fmt::format("{}]", range.hi);
  return fmt::format("{}{}, {}", range.lo_open ? '(' : '[', range.lo, hi);
}

}  // namespace

Section::Section(const YAML::Node& node, std::string path, std::string source,
                 std::initializer_list<std::string_view> known)
    : node_(node), path_(std::move(path)), source_(std::move(source)), known_(known) {
  if (!node_.IsDefined() || node_.IsNull()) return;
  if (!node_.IsMap()) fail("", fmt::format("expected a map of settings, got {}", describe(node_)));
  std::vector<std::string> seen;
  for (const auto& entry : node_) {
    if (!entry.first.IsScalar()) fail("", fmt::format("keys must be plain strings, got {}", describe(entry.first)));
    const std::string& key = entry.first.Scalar();
    if (std::find(known_.begin(), known_.end(), key) == known_.end())
      fail(key, fmt::format("unknown key (known: {})", fmt::join(known_, ", ")));
    // yaml-cpp keeps both entries and answers lookups with the first: say so instead.
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) fail(key, "given twice");
    seen.push_back(key);
  }
}

Section Section::child(std::string_view key, std::initializer_list<std::string_view> known) const {
  SPECPIPE_CHECK(std::find(known_.begin(), known_.end(), key) != known_.end());
  const YAML::Node value = has(key) ? node_[std::string(key)] : YAML::Node();
  return Section(value, key_path(key), source_, known);
}

bool Section::has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined();
}

std::string Section::key_path(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  if (key.empty()) return path_;
  return fmt::format("{}.{}", path_, key);
}

void Section::fail(std::string_view key, std::string_view reason) const {
  const std::string where = key_path(key);
  if (where.empty()) specpipe::fail(ErrorCode::invalid_argument, "{}: {}", source_, reason);
  specpipe::fail(ErrorCode::invalid_argument, "{}: {}: {}", source_, where, reason);
}

std::optional<YAML::Node> Section::scalar(std::string_view key, std::string_view expected,
                                          bool plain_only) const {
  SPECPIPE_CHECK(std::find(known_.begin(), known_.end(), key) != known_.end());
  if (!has(key)) return std::nullopt;
  const YAML::Node value = node_[std::string(key)];
  if (!value.IsScalar()) fail(key, fmt::format("expected {}, got {}", expected, describe(value)));
  if (plain_only && is_quoted(value))
    fail(key, fmt::format("expected {}, got \"{}\" (quoted, so a string)", expected, value.Scalar()));
  return value;
}

std::optional<int64_t> Section::integer(std::string_view key, IntRange range) const {
  const auto node = scalar(key, "an integer");
  if (!node) return std::nullopt;
  const std::string& text = node->Scalar();
  if (!is_decimal_integer(text)) fail(key, fmt::format("expected an integer, got \"{}\"", text));
  const char* first = text.data() + (text.front() == '+' ? 1 : 0);
  int64_t value = 0;
  const auto [end, error] = std::from_chars(first, text.data() + text.size(), value);
  // An int64 overflow is out of range too, whatever the bounds.
  if (error != std::errc() || value < range.lo || value > range.hi)
    fail(key, fmt::format("{} is out of range [{}, {}]", text, range.lo, range.hi));
  return value;
}

void Section::read(std::string_view key, float& out, RealRange range) const {
  const auto node = scalar(key, "a number");
  if (!node) return;
  const std::string& text = node->Scalar();
  if (is_yaml_non_finite(text)) fail(key, fmt::format("{} is not a finite number", text));
  // from_chars takes no '+'; "+-5" keeps its '+' and fails as it should.
  const bool plus = text.size() > 1 && text[0] == '+' && text[1] != '-';
  const char* first = text.data() + (plus ? 1 : 0);
  const char* last = text.data() + text.size();
  double value = 0;
  const auto [end, error] = std::from_chars(first, last, value, std::chars_format::general);
  if (end != last || (error != std::errc() && error != std::errc::result_out_of_range))
    fail(key, fmt::format("expected a number, got \"{}\"", text));
  // from_chars also reads "nan" and "inf".
  if (error == std::errc() && !std::isfinite(value)) fail(key, fmt::format("{} is not a finite number", text));
  const bool below = range.lo_open ? value <= range.lo : value < range.lo;
  // Beyond float's range the conversion below would be undefined, not infinite.
  const bool fits_float = std::fabs(value) <= std::numeric_limits<float>::max();
  if (error != std::errc() || below || value > range.hi || !fits_float)
    fail(key, fmt::format("{} is out of range {}", text, format_range(range)));
  out = static_cast<float>(value);
}

void Section::read(std::string_view key, bool& out) const {
  const auto node = scalar(key, "true or false");
  if (!node) return;
  const std::string& text = node->Scalar();
  if (text != "true" && text != "false") fail(key, fmt::format("expected true or false, got \"{}\"", text));
  out = text == "true";
}

void Section::read(std::string_view key, std::string& out) const {
  const auto node = scalar(key, "a string", /*plain_only=*/false);
  if (!node) return;
  if (node->Scalar().empty()) fail(key, "must not be empty");
  out = node->Scalar();
}

void Section::read_choice(std::string_view key, std::string& out,
                          std::initializer_list<std::string_view> choices) const {
  std::string value = out;
  read(key, value);
  if (std::find(choices.begin(), choices.end(), value) == choices.end())
    fail(key, fmt::format("unknown value \"{}\" (known: {})", value, fmt::join(choices, ", ")));
  out = std::move(value);
}

}  // namespace specpipe::config_yaml
