#include "model/tokenizer/byte_level.h"

#include <array>

#include "model/tokenizer/utf8.h"

namespace specpipe::tokenizer::byte_level {
namespace {

constexpr bool spells_itself(unsigned byte) {
  return (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

constexpr char32_t kFirstShiftedChar = 0x100;
constexpr unsigned kShiftedCount = 68;  // 256 bytes minus the 188 that spell themselves

struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<uint8_t, kShiftedCount> byte_of_shifted{};  // index: cp - U+0100
};

constexpr Alphabet build_alphabet() {
  Alphabet alphabet;
  unsigned shifted = 0;
  for (unsigned byte = 0; byte < 256; ++byte) {
    if (spells_itself(byte)) {
      alphabet.char_of_byte[byte] = static_cast<char32_t>(byte);
    } else {
      alphabet.char_of_byte[byte] = kFirstShiftedChar + shifted;
      alphabet.byte_of_shifted[shifted] = static_cast<uint8_t>(byte);
      ++shifted;
    }
  }
  return alphabet;
}

constexpr Alphabet kAlphabet = build_alphabet();
static_assert(kAlphabet.char_of_byte[' '] == 0x120);   // 'Ġ'
static_assert(kAlphabet.char_of_byte['\n'] == 0x10A);  // 'Ċ'

}  // namespace

char32_t char_of_byte(uint8_t byte) { return kAlphabet.char_of_byte[byte]; }

std::optional<uint8_t> byte_of_char(char32_t cp) {
  if (cp < 0x100) {
    if (spells_itself(static_cast<unsigned>(cp))) return static_cast<uint8_t>(cp);
    return std::nullopt;
  }
  if (cp < kFirstShiftedChar + kShiftedCount) return kAlphabet.byte_of_shifted[cp - 0x100];
  return std::nullopt;
}

std::string spell(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char byte : bytes) utf8::append(out, char_of_byte(static_cast<uint8_t>(byte)));
  return out;
}

std::string unspell(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const std::optional<uint8_t> byte = byte_of_char(utf8::decode_next(token, pos));
    if (!byte) return std::string(token);
    bytes.push_back(static_cast<char>(*byte));
  }
  return bytes;
}

}  // namespace specpipe::tokenizer::byte_level
