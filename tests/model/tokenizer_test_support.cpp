#include "tests/model/tokenizer_test_support.h"

#include <array>
#include <fstream>
#include <string_view>

#include "model/tokenizer/utf8.h"
#include "tests/support/test_paths.h"

namespace specpipe::test {
namespace {

constexpr std::array<std::string_view, 24> kWhiteSpace = {
    " ", "  ", "    ", "\t", "\n", "\r\n", "\r", "\n\n", "\v", "\f", "\u00a0", "\u2003",
    "\u3000", "\u0085", "\u2028", "\u2029", "\u1680", "\u202f", "\u205f", "\u180e", "\u200b",
    "\ufeff", "\x1c", "\t\t"};
constexpr std::array<std::string_view, 24> kCode = {
    "def ",   "return ", "self.", "__init__", "(",  ")",     "[",       "]",
    "{",      "}",       ":",     " = ",      "==", "->",    "# note",  "\"\"\"",
    "import numpy as np", "x_1", "0x1F", "1e-5", "...", "**kwargs", "lambda", "</div>"};
constexpr std::array<std::string_view, 14> kContractions = {
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Re", "\u2019s", "'x", "'\u017f",
    "'\u212a"};
constexpr std::array<std::string_view, 10> kDigits = {
    "0", "7", "42", "123456789", "3.14", "\u0663\u0664", "\uff11\uff12", "\u00bd", "\u216b",
    "\u09e9"};
constexpr std::array<std::string_view, 9> kEmoji = {
    "\U0001F642", "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\u2764\ufe0f", "\U0001F1EB\U0001F1F7", "\U0001F916", "\U0001F525", "\U0001D518",
    "\U0001FAE0"};
/// Base letters that compose with the marks below, Hangul jamo that compose with
/// each other, and marks of different combining classes (so NFC reorders them).
constexpr std::array<std::string_view, 12> kComposable = {
    "e\u0301", "A\u030a", "o\u0308\u0304", "a\u0316\u0301", "n\u0303", "c\u0327",
    "\u1100\u1161", "\u1100\u1161\u11a8", "\u3046\u3099", "\u0915\u093c", "s\u0323\u0307",
    "\u212b"};
constexpr std::array<std::string_view, 12> kMarks = {
    "\u0301", "\u0300", "\u0308", "\u0323", "\u0345", "\u0316", "\u0327", "\u3099",
    "\u093c", "\u05b0", "\u08cf", "\u0651"};
/// Code point ranges of other scripts: Cyrillic, Greek, Arabic, Hebrew, Devanagari,
/// Thai, Hangul syllables, kana, CJK, Latin Extended, fullwidth forms.
constexpr std::array<std::pair<char32_t, char32_t>, 11> kScripts = {{
    {0x0400, 0x04FF}, {0x0370, 0x03FF}, {0x0600, 0x06FF}, {0x05D0, 0x05EA}, {0x0900, 0x097F},
    {0x0E00, 0x0E7F}, {0xAC00, 0xD7A3}, {0x3040, 0x30FF}, {0x4E00, 0x9FFF}, {0x0100, 0x024F},
    {0xFF00, 0xFFEF}}};

}  // namespace

std::filesystem::path demo_tokenizer_path() {
  return model_dir("demo-target") / "tokenizer.json";
}

const Tokenizer& demo_tokenizer() {
  static const Tokenizer tokenizer = Tokenizer::from_file(demo_tokenizer_path());
  return tokenizer;
}

const nlohmann::json& demo_tokenizer_json() {
  static const nlohmann::json parsed = [] {
    std::ifstream in(demo_tokenizer_path());
    return nlohmann::json::parse(in);
  }();
  return parsed;
}

std::filesystem::path write_tokenizer_variant(const char* tag,
                                              const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json variant = demo_tokenizer_json();
  edit(variant);
  const std::filesystem::path path = scratch_dir(tag) / "tokenizer.json";
  std::ofstream(path) << variant.dump();
  return path;
}

std::string RandomText::next() {
  std::string text;
  const size_t pieces = below(24);
  for (size_t i = 0; i < pieces; ++i) append_piece(text);
  return text;
}

void RandomText::append_code_point(std::string& out) {
  char32_t cp = 0;
  const size_t kind = below(10);
  if (kind < 5) {
    const auto [first, last] = kScripts[below(kScripts.size())];
    cp = first + static_cast<char32_t>(below(last - first + 1));
  } else if (kind < 8) {
    cp = 0x20 + static_cast<char32_t>(below(0x2FFFF - 0x20));
  } else {
    cp = static_cast<char32_t>(below(0x110000));
  }
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'A';  // surrogates are not characters
  tokenizer::utf8::append(out, cp);
}

void RandomText::append_piece(std::string& out) {
  const size_t kind = below(100);
  if (kind < 16) {
    const size_t letters = 1 + below(10);
    for (size_t i = 0; i < letters; ++i) {
      out.push_back("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"[below(53)]);
    }
  } else if (kind < 30) {
    out.append(kCode[below(kCode.size())]);
  } else if (kind < 44) {
    const size_t runs = 1 + below(4);
    for (size_t i = 0; i < runs; ++i) out.append(kWhiteSpace[below(kWhiteSpace.size())]);
  } else if (kind < 51) {
    out.append(kContractions[below(kContractions.size())]);
  } else if (kind < 58) {
    out.append(kDigits[below(kDigits.size())]);
  } else if (kind < 64) {
    out.append(kEmoji[below(kEmoji.size())]);
  } else if (kind < 72) {
    out.append(kComposable[below(kComposable.size())]);
  } else if (kind < 78) {
    out.append(kMarks[below(kMarks.size())]);
  } else if (kind < 82) {
    out.append("<|endoftext|>");
  } else {
    const size_t count = 1 + below(5);
    for (size_t i = 0; i < count; ++i) append_code_point(out);
  }
}

}  // namespace specpipe::test
