#pragma once
/// The pattern of a Split pre-tokenizer, compiled once with PCRE2 (8-bit, UTF + UCP
/// so that \p{L}, \s and case folding follow Unicode; JIT when the platform has it).
/// Matching is thread-safe: the compiled pattern is read-only and each call makes
/// its own match data.
#include <memory>
#include <string_view>
#include <vector>

namespace specpipe::tokenizer {

class SplitPattern {
 public:
  /// Compiles a regular expression (the {"Regex": ...} form). Throws
  /// Error(unsupported) naming `path` when PCRE2 cannot compile it.
  static SplitPattern regex(std::string_view pattern, std::string_view path);
  /// A pattern that matches `text` literally (the {"String": ...} form).
  static SplitPattern literal(std::string_view text, std::string_view path);

  /// Appends to `pieces` the "Isolated" split of `text` (valid UTF-8): every
  /// non-empty match and every non-empty stretch between matches, in order, so
  /// that the pieces concatenate back to `text`. The views point into `text`.
  void split_isolated(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Compiled;
  explicit SplitPattern(std::shared_ptr<const Compiled> compiled);

  std::shared_ptr<const Compiled> compiled_;
};

}  // namespace specpipe::tokenizer
