#include "model/tokenizer/added_tokens.h"

#include <algorithm>

#include "core/error.h"
#include "model/tokenizer/utf8.h"

namespace specpipe::tokenizer {
namespace {

bool is_continuation_byte(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

/// The start of the run of whitespace that ends at `end`, not going before `floor`.
size_t white_space_run_start(std::string_view text, size_t floor, size_t end) {
  size_t start = end;
  while (start > floor) {
    size_t char_start = start - 1;
    while (char_start > floor && is_continuation_byte(text[char_start])) --char_start;
    size_t pos = char_start;
    if (!utf8::is_white_space(utf8::decode_next(text, pos))) break;
    start = char_start;
  }
  return start;
}

/// The end of the run of whitespace that starts at `begin`.
size_t white_space_run_end(std::string_view text, size_t begin) {
  size_t end = begin;
  while (end < text.size()) {
    size_t pos = end;
    if (!utf8::is_white_space(utf8::decode_next(text, pos))) break;
    end = pos;
  }
  return end;
}

AddedToken read_token(const Json& node, const std::string& path) {
  require_object(node, path);
  AddedToken token;
  token.content = require_string(node, "content", path);
  if (token.content.empty()) fail_malformed(member_path(path, "content"), "must not be empty");
  const Json* id = find_member(node, "id");
  if (id == nullptr || !id->is_number_integer() || id->get<int64_t>() < 0 ||
      id->get<int64_t>() >= (int64_t{1} << 24)) {
    fail_malformed(member_path(path, "id"), "must be a non-negative integer below 2^24");
  }
  token.id = static_cast<int32_t>(id->get<int64_t>());
  token.special = optional_bool(node, "special", false, path);
  token.lstrip = optional_bool(node, "lstrip", false, path);
  token.rstrip = optional_bool(node, "rstrip", false, path);
  token.normalized = optional_bool(node, "normalized", !token.special, path);
  if (optional_bool(node, "single_word", false, path)) {
    fail_unsupported(member_path(path, "single_word"), true, "false");
  }
  return token;
}

}  // namespace

AddedVocabulary AddedVocabulary::from_json(const Json& node, const Normalizer& normalizer,
                                           const BpeModel& model, std::string_view path_view) {
  const std::string path(path_view);
  AddedVocabulary vocabulary;
  if (node.is_null()) return vocabulary;
  if (!node.is_array()) fail_malformed(path, "must be a list");
  // Hugging Face ignores the ids written in the file: it gives a token the id it
  // already has (as an earlier added token or in the vocabulary), else the next id
  // after the vocabulary and the tokens added so far. Files it writes agree with
  // that; one that does not would encode differently here and there, so refuse it.
  int32_t next_new_id = model.entry_count();
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string token_path = element_path(path, i);
    AddedToken token = read_token(node[i], token_path);
    std::optional<int32_t> expected_id = vocabulary.id_of(token.content);
    if (!expected_id) expected_id = model.token_to_id(token.content);
    if (!expected_id) expected_id = next_new_id;
    if (token.id != *expected_id) {
      fail_malformed(member_path(token_path, "id"),
                     fmt::format("{} of '{}' is not the id Hugging Face gives it ({})", token.id,
                                 token.content, *expected_id));
    }
    next_new_id = std::max(next_new_id, token.id + 1);
    vocabulary.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < vocabulary.tokens_.size(); ++i) {
    const AddedToken& token = vocabulary.tokens_[i];
    Matcher& matcher = token.normalized ? vocabulary.normalized_ : vocabulary.raw_;
    std::string pattern = token.normalized ? normalizer.normalize(token.content) : token.content;
    if (pattern.empty()) continue;
    const auto first_byte = static_cast<unsigned char>(pattern[0]);
    matcher.by_first_byte[first_byte].push_back(Matcher::Candidate{std::move(pattern), i});
    matcher.empty = false;
  }
  for (Matcher* matcher : {&vocabulary.raw_, &vocabulary.normalized_}) {
    for (auto& candidates : matcher->by_first_byte) {
      std::stable_sort(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
        return a.pattern.size() > b.pattern.size();
      });
    }
  }
  return vocabulary;
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  for (const AddedToken& token : tokens_) {
    if (token.content == content) return token.id;
  }
  return std::nullopt;
}

void AddedVocabulary::split(const Matcher& matcher, std::string_view text,
                            std::vector<TextSegment>& out) const {
  size_t plain_begin = 0;  // start of the text not yet emitted
  size_t pos = 0;
  while (!matcher.empty && pos < text.size()) {
    const auto& candidates = matcher.by_first_byte[static_cast<unsigned char>(text[pos])];
    const auto match = std::find_if(candidates.begin(), candidates.end(), [&](const auto& c) {
      return text.substr(pos).starts_with(c.pattern);
    });
    if (match == candidates.end()) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[match->token_index];
    size_t match_begin = pos;
    size_t match_end = pos + match->pattern.size();
    if (token.lstrip) match_begin = white_space_run_start(text, plain_begin, match_begin);
    if (token.rstrip) match_end = white_space_run_end(text, match_end);
    if (match_begin > plain_begin) {
      out.push_back(TextSegment{text.substr(plain_begin, match_begin - plain_begin)});
    }
    out.push_back(TextSegment{{}, token.id});
    plain_begin = pos = match_end;
  }
  if (plain_begin < text.size()) out.push_back(TextSegment{text.substr(plain_begin)});
}

}  // namespace specpipe::tokenizer
