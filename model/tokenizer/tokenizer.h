#pragma once
/// A Hugging Face tokenizer.json tokenizer: byte-level BPE with added/special tokens,
/// Unicode normalisation and regex pre-tokenisation (see README.md in this folder for
/// what is supported). Loading refuses, with Error(unsupported) naming the JSON path
/// and value, every component it does not implement, so a tokenizer that loads
/// encodes exactly as Hugging Face's `encode(text, add_special_tokens=False)`.
///
/// A Tokenizer is a cheap handle: copies share one immutable tokenizer (and its
/// thread-safe cache), and every method may be called from several threads at once.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace specpipe {

class Tokenizer {
 public:
  /// Loads a tokenizer.json. Throws Error naming the file: not_found when it does not
  /// exist, corrupt_file when it is not valid JSON or misses required parts,
  /// unsupported (with the JSON path and value) for components not implemented.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);

  /// The ids of `text` (UTF-8). Adds no BOS/EOS; added and special tokens written in
  /// the text (e.g. "<|endoftext|>") become their ids. Throws Error(invalid_argument)
  /// when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text) const;

  /// The text of `ids`. Bytes that do not form valid UTF-8 become U+FFFD, one per
  /// maximal invalid subpart, as in Hugging Face. Special tokens are dropped when
  /// `skip_special_tokens`. Throws Error(invalid_argument) naming an id that is out of
  /// range or has no token.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  /// One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;

  /// The id of a token as written in tokenizer.json (an added token's content, or a
  /// vocabulary entry spelt in the ByteLevel alphabet, e.g. "Ġthe").
  std::optional<int32_t> token_to_id(std::string_view token) const;

  /// True for the ids of added tokens marked "special"; false for any other id.
  bool is_special(int32_t id) const;

  /// The raw bytes that `id` contributes to decoded text, before UTF-8 repair; may be
  /// part of a multi-byte character. Throws like decode() for an invalid id.
  std::string_view token_bytes(int32_t id) const;

 private:
  struct Impl;  // defined in tokenizer_impl.h, inside this folder only
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace specpipe
