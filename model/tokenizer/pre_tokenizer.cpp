#include "model/tokenizer/pre_tokenizer.h"

#include "core/error.h"

namespace specpipe::tokenizer {
namespace {

constexpr std::string_view kSupportedTypes = "Sequence, Split, ByteLevel";

/// The regex the ByteLevel pre-tokenizer applies when use_regex is true (GPT-2's).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void split_all(const SplitPattern& pattern, std::vector<std::string_view>& pieces,
               std::vector<std::string_view>& scratch) {
  scratch.clear();
  for (const std::string_view piece : pieces) pattern.split_isolated(piece, scratch);
  pieces.swap(scratch);
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const Json& node, std::string_view path) {
  if (node.is_null()) {
    fail_unsupported(path, node, "ByteLevel, or a Sequence ending in ByteLevel");
  }
  PreTokenizer pre_tokenizer;
  pre_tokenizer.append_steps(node, std::string(path));
  if (!pre_tokenizer.has_byte_level_) {
    fail(ErrorCode::unsupported, "{} has no ByteLevel step; only byte-level BPE is supported",
         path);
  }
  return pre_tokenizer;
}

void PreTokenizer::append_steps(const Json& node, const std::string& path) {
  require_object(node, path);
  const std::string type = require_string(node, "type", path);
  if (has_byte_level_) {
    fail(ErrorCode::unsupported,
         "{}: a {} step after ByteLevel is not supported (ByteLevel must come last)", path, type);
  }
  if (type == "Sequence") {
    const std::string steps_path = member_path(path, "pretokenizers");
    const Json* steps = find_member(node, "pretokenizers");
    if (steps == nullptr || !steps->is_array()) fail_malformed(steps_path, "must be a list");
    for (size_t i = 0; i < steps->size(); ++i) {
      append_steps((*steps)[i], element_path(steps_path, i));
    }
  } else if (type == "Split") {
    read_split(node, path);
  } else if (type == "ByteLevel") {
    read_byte_level(node, path);
  } else {
    fail_unsupported(member_path(path, "type"), type, kSupportedTypes);
  }
}

void PreTokenizer::read_split(const Json& node, const std::string& path) {
  const std::string behavior = require_string(node, "behavior", path);
  if (behavior != "Isolated") {
    fail_unsupported(member_path(path, "behavior"), behavior, "Isolated");
  }
  if (optional_bool(node, "invert", false, path)) {
    fail_unsupported(member_path(path, "invert"), true, "false");
  }
  const std::string pattern_path = member_path(path, "pattern");
  const Json* pattern = find_member(node, "pattern");
  if (pattern == nullptr || !pattern->is_object() || pattern->size() != 1) {
    fail_malformed(pattern_path, "must be {\"Regex\": ...} or {\"String\": ...}");
  }
  const std::string kind = pattern->begin().key();
  const Json& text = pattern->begin().value();
  if (!text.is_string()) fail_malformed(member_path(pattern_path, kind), "must be a string");
  if (kind == "Regex") {
    split_steps_.push_back(
        SplitPattern::regex(text.get<std::string>(), member_path(pattern_path, kind)));
  } else if (kind == "String") {
    split_steps_.push_back(
        SplitPattern::literal(text.get<std::string>(), member_path(pattern_path, kind)));
  } else {
    fail_malformed(pattern_path, "must be {\"Regex\": ...} or {\"String\": ...}");
  }
}

void PreTokenizer::read_byte_level(const Json& node, const std::string& path) {
  has_byte_level_ = true;
  // Defaults follow Hugging Face's ByteLevel::default(). trim_offsets only moves
  // offsets, which this engine does not report.
  add_prefix_space_ = optional_bool(node, "add_prefix_space", true, path);
  if (optional_bool(node, "use_regex", true, path)) {
    byte_level_regex_.push_back(SplitPattern::regex(kGpt2Pattern, member_path(path, "use_regex")));
  }
}

void PreTokenizer::split(std::string_view segment, PieceList& out) const {
  out.clear();
  out.pieces.push_back(segment);
  std::vector<std::string_view> scratch;
  for (const SplitPattern& step : split_steps_) split_all(step, out.pieces, scratch);
  if (add_prefix_space_) {
    for (std::string_view& piece : out.pieces) {
      if (piece.empty() || piece.front() == ' ') continue;
      std::string& prefixed = out.owned.emplace_back();
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      piece = prefixed;
    }
  }
  for (const SplitPattern& step : byte_level_regex_) split_all(step, out.pieces, scratch);
}

}  // namespace specpipe::tokenizer
