#pragma once
/// The `normalizer` of tokenizer.json: Unicode normalisation forms (NFC, NFD, NFKC,
/// NFKD, through libutf8proc), alone or in a Sequence. Anything else is refused at
/// load time. A null normalizer leaves text unchanged.
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/json_fields.h"

namespace specpipe::tokenizer {

enum class UnicodeForm { nfc, nfd, nfkc, nfkd };

/// `text` (valid UTF-8) in normalisation form `form`, as Hugging Face tokenizers
/// computes it (its Unicode data is older than utf8proc's; see normalizer.cpp).
std::string normalize_unicode(std::string_view text, UnicodeForm form);

class Normalizer {
 public:
  /// Reads the `normalizer` node found at `path`; throws Error(unsupported) naming the
  /// path and value of any component this engine does not implement.
  static Normalizer from_json(const Json& node, std::string_view path);

  /// True when normalize() returns its input unchanged.
  bool is_identity() const { return forms_.empty(); }

  /// `text` (valid UTF-8) through every step in order.
  std::string normalize(std::string_view text) const;

 private:
  void append_steps(const Json& node, const std::string& path);

  std::vector<UnicodeForm> forms_;
};

}  // namespace specpipe::tokenizer
