#pragma once
/// Shared by the tokenizer harnesses: what every encode/decode of a loaded tokenizer must
/// satisfy, whatever the input. A broken promise aborts (libFuzzer reports it as a crash).
#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "model/tokenizer/incremental_decoder.h"
#include "model/tokenizer/tokenizer.h"

namespace specpipe::fuzz {

/// Valid UTF-8 by utf8proc's reading, an oracle independent of the tokenizer's own.
inline bool valid_utf8(std::string_view s) {
  auto p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  auto left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const auto n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) return false;
    p += n;
    left -= n;
  }
  return true;
}

/// decode(ids) is valid UTF-8 and equals the incremental decoder's pushes plus flush,
/// with and without special tokens. Every id must be one the tokenizer has.
inline std::string check_decode(const Tokenizer& tok, std::span<const int32_t> ids) {
  std::string whole;
  for (const bool skip : {false, true}) {
    const std::string text = tok.decode(ids, skip);
    if (!valid_utf8(text)) std::abort();
    IncrementalDecoder stream(tok, skip);
    std::string pieces;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      if (!valid_utf8(piece)) std::abort();
      pieces += piece;
    }
    pieces += stream.flush();
    if (pieces != text || stream.pending_bytes() != 0) std::abort();
    if (!skip) whole = text;
  }
  return whole;
}

/// encode(text): refused (invalid_argument) exactly when text is not valid UTF-8; else
/// ids in range that decode as check_decode requires. With `exact` (a tokenizer whose
/// only normaliser is NFC and whose added tokens strip nothing, as the demo's), also:
/// the decoding, encoded again, gives the same ids (NFC is idempotent and makes no
/// ASCII), and ASCII text (which NFC leaves alone) decodes back to itself.
inline void check_round_trip(const Tokenizer& tok, std::string_view text, bool exact) {
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::invalid_argument || valid_utf8(text)) std::abort();
    return;
  }
  if (!valid_utf8(text)) std::abort();
  for (const int32_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  const std::string back = check_decode(tok, ids);
  if (!exact) return;
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii && back != text) std::abort();
  if (tok.encode(back) != ids) std::abort();
}

}  // namespace specpipe::fuzz
