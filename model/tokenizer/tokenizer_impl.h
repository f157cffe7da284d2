#pragma once
/// The state behind a Tokenizer handle (private to model/tokenizer/).
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/normalizer.h"
#include "model/tokenizer/pre_tokenizer.h"
#include "model/tokenizer/tokenizer.h"

namespace specpipe {

struct Tokenizer::Impl {
  tokenizer::Normalizer normalizer;
  tokenizer::PreTokenizer pre_tokenizer;
  tokenizer::BpeModel model;
  tokenizer::AddedVocabulary added;

  /// Per id: the bytes it decodes to, whether any token has the id, whether special.
  std::vector<std::string> bytes_by_id;
  std::vector<uint8_t> id_assigned;
  std::vector<uint8_t> id_special;

  /// Builds the tokenizer from the whole parsed tokenizer.json. Errors name the JSON
  /// path but not the file; from_file adds that.
  static Impl from_json(const tokenizer::Json& root);
};

}  // namespace specpipe
