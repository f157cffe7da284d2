#pragma once
/// One request's output as it is generated: token ids in, streamed text out, and the
/// decision when generation ends (EOS, stop strings, max_tokens).
///
/// The scheduler pushes every token of a round one at a time, so a speculative round
/// that appends several tokens ends exactly where plain decoding would have: the
/// token that completes a stop string (or is EOS, or reaches max_tokens) finishes the
/// stream, and the caller discards the rest of the round.
///
/// Text is only ever emitted once it is final: whole UTF-8 characters (through
/// IncrementalDecoder), and never a tail that may still become the start of a stop
/// string. That tail is held back, minimally: the longest suffix of the not yet
/// emitted text that is a proper prefix of some stop string. Because of this, every
/// stop-string occurrence lies entirely in text that has not been emitted, so the
/// stream never has to take text back.
///
/// Semantics follow vLLM's defaults: a stop string is excluded from the output along
/// with everything after it; the EOS token stays in tokens() but adds no text. When
/// several stop strings match, the one whose occurrence ends first in the text wins
/// (what a character-by-character stream would hit first, so the result depends on
/// the decoded text only, not on where token boundaries fall); among occurrences that
/// end at the same character the longest wins. One stream serves one request; it is
/// not thread-safe.
#include <cstdint>
#include <string>
#include <vector>

#include "model/tokenizer/incremental_decoder.h"
#include "model/tokenizer/tokenizer.h"
#include "pipeline/generation.h"

namespace specpipe {

/// When a request's generation ends, and how its tokens become text.
struct StopConditions {
  int32_t max_tokens = 64;  ///< generation ends after this many tokens (0: at once)
  bool stop_at_eos = true;
  std::vector<int32_t> eos_ids;  ///< EOS ids (the caller fills in the model's); empty: none
  /// Text that ends generation; may span several tokens. Must be non-empty, valid UTF-8.
  std::vector<std::string> stop_strings;
  bool skip_special_tokens = true;  ///< special tokens produce no text
};

class OutputStream {
 public:
  /// Throws Error(invalid_argument) for a negative max_tokens, or a stop string that
  /// is empty or not valid UTF-8. With max_tokens == 0 the stream starts finished
  /// (reason length). Keeps a handle to the (shared, immutable) tokenizer.
  OutputStream(const Tokenizer& tokenizer, StopConditions conditions);

  /// What one push() or finish() produced.
  struct Step {
    std::string text;  ///< newly final text (valid UTF-8, possibly empty)
    bool finished = false;
    FinishReason reason = FinishReason::length;  ///< meaningful when finished
  };

  /// Appends one generated token. Throws Error(invalid_argument) after the stream has
  /// finished, or for an id the tokenizer does not have (the stream is then
  /// unchanged). Finishes the stream when:
  /// - the token is an EOS id and stop_at_eos (reason eos): the token is kept in
  ///   tokens() and adds no text; held-back text is released;
  /// - the text now contains a stop string (reason stop): tokens() ends with this
  ///   token; the text ends right before the stop string, the rest is discarded;
  /// - tokens() reaches max_tokens (reason length): held-back text is released.
  Step push(int32_t token);

  /// Ends the stream from outside (cancel, context limit, error): releases held-back
  /// text, an unfinished UTF-8 character as U+FFFD (as IncrementalDecoder::flush), and
  /// records `reason`. Throws Error(invalid_argument) when already finished.
  Step finish(FinishReason reason);

  bool finished() const { return finished_; }
  /// Why the stream finished; meaningful only when finished().
  FinishReason reason() const { return reason_; }
  /// The output tokens, up to and including the one that finished the stream.
  const std::vector<int32_t>& tokens() const { return tokens_; }
  /// All text emitted so far: the concatenation of every Step::text.
  const std::string& text() const { return text_; }

 private:
  bool is_eos(int32_t token) const;
  /// Moves the first `length` bytes of pending_ to text_ and returns them as a Step.
  Step emit(size_t length);
  /// Releases everything still held (pending_ and the decoder's partial character)
  /// and finishes with `reason`.
  Step release_and_finish(FinishReason reason);

  Tokenizer tokenizer_;
  StopConditions conditions_;
  IncrementalDecoder decoder_;
  std::vector<int32_t> tokens_;
  std::string text_;     ///< emitted
  std::string pending_;  ///< decoded but held back: may be the start of a stop string
  bool finished_ = false;
  FinishReason reason_ = FinishReason::length;
};

}  // namespace specpipe
