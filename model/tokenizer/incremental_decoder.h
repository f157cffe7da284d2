#pragma once
/// Streaming detokenisation: turns ids into text one at a time without ever emitting
/// part of a UTF-8 character. A token may end in the middle of a character (byte-level
/// BPE splits emoji and CJK across tokens); those bytes are held until the character
/// is complete or can no longer be, then emitted whole or as U+FFFD.
///
/// Invariant: the concatenation of every push() and the final flush() equals
/// Tokenizer::decode(all ids, skip_special_tokens), and each returned string is valid
/// UTF-8. One decoder serves one stream; it is not thread-safe.
#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace specpipe {

class IncrementalDecoder {
 public:
  /// Decodes with `tokenizer` (the decoder keeps a handle to the same shared
  /// tokenizer). Special tokens are dropped when `skip_special_tokens`.
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);

  /// The text completed by `id`: whole UTF-8 characters only, possibly empty. Throws
  /// Error(invalid_argument) for an id the tokenizer does not have.
  std::string push(int32_t id);

  /// Whatever is still held (an unfinished character becomes U+FFFD); the decoder is
  /// then empty and may start a new stream.
  std::string flush();

  /// Bytes held back because they may still become a character (0 to 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  Tokenizer tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;  ///< the unfinished tail of a character
};

}  // namespace specpipe
