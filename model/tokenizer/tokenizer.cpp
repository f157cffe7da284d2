// Encoding, decoding and lookups of a loaded Tokenizer.
#include "model/tokenizer/tokenizer.h"

#include "core/error.h"
#include "model/tokenizer/tokenizer_impl.h"
#include "model/tokenizer/utf8.h"

namespace specpipe {

using tokenizer::TextSegment;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  if (const std::optional<size_t> bad = tokenizer::utf8::first_invalid_offset(text)) {
    fail(ErrorCode::invalid_argument,
         "Tokenizer::encode: the text is not valid UTF-8 (byte offset {})", *bad);
  }
  const Impl& impl = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);

  // Added tokens are cut out before normalisation, the rest is normalised, tokens
  // marked "normalized" are cut out of that, and each remaining stretch is split into
  // pieces that BPE encodes one by one.
  std::vector<TextSegment> raw_segments;
  impl.added.split_raw(text, raw_segments);
  std::vector<TextSegment> normalized_segments;
  tokenizer::PieceList pieces;
  for (const TextSegment& raw : raw_segments) {
    if (raw.token_id != TextSegment::kPlainText) {
      ids.push_back(raw.token_id);
      continue;
    }
    const std::string normalized = impl.normalizer.normalize(raw.text);
    normalized_segments.clear();
    impl.added.split_normalized(normalized, normalized_segments);
    for (const TextSegment& segment : normalized_segments) {
      if (segment.token_id != TextSegment::kPlainText) {
        ids.push_back(segment.token_id);
        continue;
      }
      impl.pre_tokenizer.split(segment.text, pieces);
      for (const std::string_view piece : pieces.pieces) impl.model.encode_piece(piece, ids);
    }
  }
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const Impl& impl = *impl_;
  if (id < 0 || id >= vocab_size()) {
    fail(ErrorCode::invalid_argument, "token id {} is out of range [0, {})", id, vocab_size());
  }
  if (!impl.id_assigned[id]) fail(ErrorCode::invalid_argument, "token id {} has no token", id);
  return impl.bytes_by_id[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (const int32_t id : ids) {
    const std::string_view token = token_bytes(id);  // validates the id first
    if (skip_special_tokens && is_special(id)) continue;
    bytes.append(token);
  }
  return tokenizer::utf8::repair(bytes);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->bytes_by_id.size()); }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const std::optional<int32_t> id = impl_->added.id_of(token)) return id;
  return impl_->model.token_to_id(token);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->id_special[id] != 0;
}

}  // namespace specpipe
