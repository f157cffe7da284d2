#pragma once
/// The ByteLevel alphabet of GPT-2 style tokenizers: a reversible map from each of the
/// 256 byte values to a printable code point, so that any byte string can be spelt
/// with vocabulary entries. Printable Latin-1 bytes map to themselves; the other 68
/// (controls, space, U+007F-U+00A0, U+00AD) map, in byte order, to U+0100-U+0143
/// (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace specpipe::tokenizer::byte_level {

/// The code point that spells byte `byte`.
char32_t char_of_byte(uint8_t byte);

/// The byte spelt by `cp`, or nullopt when `cp` is not in the alphabet.
std::optional<uint8_t> byte_of_char(char32_t cp);

/// `bytes` spelt in the alphabet, as UTF-8 (the form vocabulary entries take).
std::string spell(std::string_view bytes);

/// The bytes a vocabulary entry stands for, as the ByteLevel decoder reads it: when
/// every character of `token` is in the alphabet, the bytes they spell; otherwise
/// (e.g. an added token such as "<｜end｜>") the token's own UTF-8 bytes.
/// Precondition: `token` is valid UTF-8.
std::string unspell(std::string_view token);

}  // namespace specpipe::tokenizer::byte_level
