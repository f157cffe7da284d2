#pragma once
/// UTF-8 helpers for the tokenizer: validation, lossy repair with the same
/// replacement rule as Hugging Face tokenizers (Rust's String::from_utf8_lossy: each
/// maximal invalid subpart becomes one U+FFFD), and the streaming variant that holds
/// back a trailing sequence that may still be completed by later bytes.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace specpipe::tokenizer::utf8 {

/// The byte offset of the first byte that is not part of a well-formed UTF-8
/// sequence, or nullopt when all of `bytes` is valid UTF-8.
std::optional<size_t> first_invalid_offset(std::string_view bytes);

inline bool is_valid(std::string_view bytes) { return !first_invalid_offset(bytes); }

/// Decodes the code point starting at `text[pos]` and advances `pos` past it.
/// Precondition: `text` is valid UTF-8 and `pos` is at a character boundary.
char32_t decode_next(std::string_view text, size_t& pos);

/// Appends the UTF-8 encoding of `cp` (a Unicode scalar value) to `out`.
void append(std::string& out, char32_t cp);

/// Appends to `out` the settled prefix of `bytes`: every complete character, and one
/// U+FFFD per maximal invalid subpart that later bytes can no longer complete.
/// Returns how many bytes of `bytes` were consumed; the rest (at most 3 bytes) is a
/// valid but unfinished sequence that the caller must keep for the next call.
size_t append_settled(std::string_view bytes, std::string& out);

/// `bytes` as valid UTF-8: invalid subparts and an unfinished tail become U+FFFD.
std::string repair(std::string_view bytes);

/// Unicode's White_Space property (what Rust's char::is_whitespace tests).
bool is_white_space(char32_t cp);

}  // namespace specpipe::tokenizer::utf8
