#include "model/tokenizer/utf8.h"

#include <cstdint>

namespace specpipe::tokenizer::utf8 {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

/// How the bytes at one position read as UTF-8 (Unicode table 3-7).
struct SequenceScan {
  enum class Kind { character, invalid, unfinished } kind;
  size_t length;  ///< bytes of the character, of the invalid subpart, or available
};

SequenceScan scan_sequence(const unsigned char* p, size_t available) {
  const unsigned lead = p[0];
  if (lead < 0x80) return {SequenceScan::Kind::character, 1};
  size_t needed = 0;
  unsigned second_low = 0x80, second_high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
    if (lead == 0xE0) second_low = 0xA0;   // no overlong forms
    if (lead == 0xED) second_high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
    if (lead == 0xF0) second_low = 0x90;   // no overlong forms
    if (lead == 0xF4) second_high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {SequenceScan::Kind::invalid, 1};
  }
  for (size_t i = 1; i < needed; ++i) {
    if (i >= available) return {SequenceScan::Kind::unfinished, available};
    const unsigned low = i == 1 ? second_low : 0x80;
    const unsigned high = i == 1 ? second_high : 0xBF;
    if (p[i] < low || p[i] > high) return {SequenceScan::Kind::invalid, i};
  }
  return {SequenceScan::Kind::character, needed};
}

}  // namespace

std::optional<size_t> first_invalid_offset(std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (p[pos] < 0x80) {  // ASCII dominates real text: skip the scan call
      ++pos;
      continue;
    }
    const SequenceScan scan = scan_sequence(p + pos, bytes.size() - pos);
    if (scan.kind != SequenceScan::Kind::character) return pos;
    pos += scan.length;
  }
  return std::nullopt;
}

char32_t decode_next(std::string_view text, size_t& pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data()) + pos;
  const unsigned lead = p[0];
  if (lead < 0x80) {
    pos += 1;
    return lead;
  }
  if (lead < 0xE0) {
    pos += 2;
    return static_cast<char32_t>(((lead & 0x1Fu) << 6) | (p[1] & 0x3Fu));
  }
  if (lead < 0xF0) {
    pos += 3;
    return static_cast<char32_t>(((lead & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu));
  }
  pos += 4;
  return static_cast<char32_t>(((lead & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) |
                               ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu));
}

void append(std::string& out, char32_t cp) {
  const auto value = static_cast<uint32_t>(cp);
  if (value < 0x80) {
    out.push_back(static_cast<char>(value));
  } else if (value < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (value >> 6)));
    out.push_back(static_cast<char>(0x80 | (value & 0x3F)));
  } else if (value < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (value >> 12)));
    out.push_back(static_cast<char>(0x80 | ((value >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (value & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (value >> 18)));
    out.push_back(static_cast<char>(0x80 | ((value >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((value >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (value & 0x3F)));
  }
}

size_t append_settled(std::string_view bytes, std::string& out) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const SequenceScan scan = scan_sequence(p + pos, bytes.size() - pos);
    switch (scan.kind) {
      case SequenceScan::Kind::character:
        out.append(bytes.substr(pos, scan.length));
        break;
      case SequenceScan::Kind::invalid:
        out.append(kReplacementCharacter);
        break;
      case SequenceScan::Kind::unfinished:
        return pos;
    }
    pos += scan.length;
  }
  return pos;
}

std::string repair(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  if (append_settled(bytes, out) < bytes.size()) out.append(kReplacementCharacter);
  return out;
}

bool is_white_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace specpipe::tokenizer::utf8
