#include "model/tokenizer/incremental_decoder.h"

#include "model/tokenizer/utf8.h"

namespace specpipe {

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDecoder::push(int32_t id) {
  const std::string_view bytes = tokenizer_.token_bytes(id);  // validates the id
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_.append(bytes);
  std::string text;
  const size_t settled = tokenizer::utf8::append_settled(pending_, text);
  pending_.erase(0, settled);
  return text;
}

std::string IncrementalDecoder::flush() {
  std::string text = tokenizer::utf8::repair(pending_);
  pending_.clear();
  return text;
}

}  // namespace specpipe
