// Loading: Tokenizer::from_file and the checks of tokenizer.json's top level.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/tokenizer_impl.h"

namespace specpipe {
namespace {

using tokenizer::Json;

const Json& member_or_null(const Json& root, std::string_view key) {
  static const Json null_value;
  const Json* member = tokenizer::find_member(root, key);
  return member == nullptr ? null_value : *member;
}

/// post_processor: only ByteLevel (or none). ByteLevel's post-processing only trims
/// offsets, which this engine does not report, so it leaves ids unchanged. Templates
/// that add BOS/EOS (TemplateProcessing, ...) are refused rather than ignored.
void check_post_processor(const Json& node) {
  if (node.is_null()) return;
  tokenizer::require_object(node, "post_processor");
  const std::string type = tokenizer::require_string(node, "type", "post_processor");
  if (type != "ByteLevel")
    tokenizer::fail_unsupported("post_processor.type", type, "ByteLevel, null");
}

/// decoder: only ByteLevel, which maps the alphabet back to bytes; its options only
/// concern offsets.
void check_decoder(const Json& node) {
  if (node.is_null()) tokenizer::fail_unsupported("decoder", node, "ByteLevel");
  tokenizer::require_object(node, "decoder");
  const std::string type = tokenizer::require_string(node, "type", "decoder");
  if (type != "ByteLevel") tokenizer::fail_unsupported("decoder.type", type, "ByteLevel");
}

}  // namespace

Tokenizer::Impl Tokenizer::Impl::from_json(const Json& root) {
  tokenizer::require_object(root, "the top level");
  for (const char* key : {"truncation", "padding"}) {
    if (!tokenizer::is_absent_or_null(root, key)) {
      tokenizer::fail_unsupported(key, root[key], "null");
    }
  }
  check_post_processor(member_or_null(root, "post_processor"));
  check_decoder(member_or_null(root, "decoder"));
  const Json* model = tokenizer::find_member(root, "model");
  if (model == nullptr) tokenizer::fail_malformed("model", "is missing");

  auto normalizer =
      tokenizer::Normalizer::from_json(member_or_null(root, "normalizer"), "normalizer");
  auto pre_tokenizer =
      tokenizer::PreTokenizer::from_json(member_or_null(root, "pre_tokenizer"), "pre_tokenizer");
  auto bpe = tokenizer::BpeModel::from_json(*model, "model");
  auto added = tokenizer::AddedVocabulary::from_json(member_or_null(root, "added_tokens"),
                                                     normalizer, bpe, "added_tokens");
  Impl impl{std::move(normalizer),
            std::move(pre_tokenizer),
            std::move(bpe),
            std::move(added),
            {},
            {},
            {}};

  int32_t id_limit = impl.model.id_limit();
  for (const tokenizer::AddedToken& token : impl.added.tokens()) {
    id_limit = std::max(id_limit, token.id + 1);
  }
  impl.bytes_by_id.resize(static_cast<size_t>(id_limit));
  impl.id_assigned.assign(static_cast<size_t>(id_limit), 0);
  impl.id_special.assign(static_cast<size_t>(id_limit), 0);
  for (int32_t id = 0; id < impl.model.id_limit(); ++id) {
    if (const std::string* token = impl.model.token_of(id)) {
      impl.bytes_by_id[id] = tokenizer::byte_level::unspell(*token);
      impl.id_assigned[id] = 1;
    }
  }
  // An added token's id may also be in the vocabulary; the added token wins, as in
  // Hugging Face, which also decodes a "normalized" token as its normalised content.
  // Added tokens go through the ByteLevel decoder like any token.
  for (const tokenizer::AddedToken& token : impl.added.tokens()) {
    const std::string text =
        token.normalized ? impl.normalizer.normalize(token.content) : token.content;
    impl.bytes_by_id[token.id] = tokenizer::byte_level::unspell(text);
    impl.id_assigned[token.id] = 1;
    impl.id_special[token.id] = token.special ? 1 : 0;
  }
  return impl;
}

Tokenizer Tokenizer::from_file(const std::filesystem::path& tokenizer_json) {
  const std::string name = tokenizer_json.string();
  std::error_code status_error;
  if (!std::filesystem::is_regular_file(tokenizer_json, status_error)) {
    fail(ErrorCode::not_found, "tokenizer file {} not found", name);
  }
  std::ifstream in(tokenizer_json, std::ios::binary);
  if (!in) fail(ErrorCode::io, "{}: cannot open the file", name);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (!in && !in.eof()) fail(ErrorCode::io, "{}: read failed", name);

  Json root;
  try {
    root = Json::parse(contents.str());
  } catch (const Json::exception& error) {
    fail(ErrorCode::corrupt_file, "{}: not valid JSON: {}", name, error.what());
  }
  try {
    return Tokenizer(std::make_shared<const Impl>(Impl::from_json(root)));
  } catch (const Error& error) {
    throw Error(error.code(), fmt::format("{}: {}", name, error.what()));
  } catch (const Json::exception& error) {
    fail(ErrorCode::corrupt_file, "{}: unexpected JSON shape: {}", name, error.what());
  }
}

}  // namespace specpipe
