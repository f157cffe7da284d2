#pragma once
// Shared by the tokenizer unit tests: the demo tokenizer, a seeded generator of
// awkward UTF-8 strings, and tokenizer.json variants written to a scratch directory.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace specpipe::test {

/// models/demo-target/tokenizer.json.
std::filesystem::path demo_tokenizer_path();

/// models/demo-target/tokenizer.json, loaded once.
const Tokenizer& demo_tokenizer();

/// The parsed demo tokenizer.json, for tests that write modified copies.
const nlohmann::json& demo_tokenizer_json();

/// Writes `edit(copy of the demo tokenizer.json)` to a fresh scratch file; returns its path.
std::filesystem::path write_tokenizer_variant(const char* tag,
                                              const std::function<void(nlohmann::json&)>& edit);

/// Random strings that mix what trips tokenizers up: code, whitespace runs (\r\n, tabs,
/// Unicode spaces), combining marks (for NFC), CJK, emoji, other scripts, digits,
/// apostrophe contractions, <|endoftext|> and arbitrary code points. Deterministic
/// for a seed on every platform (no std:: distributions).
class RandomText {
 public:
  explicit RandomText(uint64_t seed) : engine_(seed) {}
  std::string next();

 private:
  size_t below(size_t bound) { return static_cast<size_t>(engine_() % bound); }
  void append_piece(std::string& out);
  void append_code_point(std::string& out);

  std::mt19937_64 engine_;
};

}  // namespace specpipe::test
