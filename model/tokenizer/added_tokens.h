#pragma once
/// The `added_tokens` of tokenizer.json (special tokens such as <|endoftext|>, and
/// any others): they are cut out of the text before BPE sees it, leftmost-longest
/// first. Tokens with "normalized": false are matched in the raw text, before
/// normalisation; tokens with "normalized": true are matched in the normalised text.
/// lstrip/rstrip swallow the whitespace beside a match; single_word is refused.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/bpe_model.h"
#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/normalizer.h"

namespace specpipe::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;     ///< dropped by decode(skip_special_tokens = true)
  bool lstrip = false;      ///< the match swallows whitespace on its left
  bool rstrip = false;      ///< the match swallows whitespace on its right
  bool normalized = false;  ///< matched after normalisation rather than before
};

/// A stretch of the input: plain text for the next stage, or one added token.
struct TextSegment {
  static constexpr int32_t kPlainText = -1;
  std::string_view text;          ///< the plain text (empty for a token)
  int32_t token_id = kPlainText;  ///< the added token's id, or kPlainText
};

class AddedVocabulary {
 public:
  /// Reads the `added_tokens` list found at `path` (null reads as empty). `normalizer`
  /// is applied to the content of tokens marked "normalized": true. Each id must be the
  /// one Hugging Face would give the token (its id in `model`, else the next free id
  /// after the vocabulary); a file that says otherwise is refused as corrupt_file.
  static AddedVocabulary from_json(const Json& node, const Normalizer& normalizer,
                                   const BpeModel& model, std::string_view path);

  /// Appends to `out` the segments of `text` around tokens matched before
  /// normalisation. Plain-text segments are never empty and view into `text`.
  void split_raw(std::string_view text, std::vector<TextSegment>& out) const {
    split(raw_, text, out);
  }
  /// The same for tokens matched after normalisation; `text` is normalised text.
  void split_normalized(std::string_view text, std::vector<TextSegment>& out) const {
    split(normalized_, text, out);
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  std::optional<int32_t> id_of(std::string_view content) const;

 private:
  /// Candidates by first byte, longest first, so that the first candidate that
  /// matches at the leftmost position is the leftmost-longest match.
  struct Matcher {
    struct Candidate {
      std::string pattern;
      size_t token_index;
    };
    std::array<std::vector<Candidate>, 256> by_first_byte;
    bool empty = true;
  };

  void split(const Matcher& matcher, std::string_view text, std::vector<TextSegment>& out) const;

  std::vector<AddedToken> tokens_;
  Matcher raw_;
  Matcher normalized_;
};

}  // namespace specpipe::tokenizer
