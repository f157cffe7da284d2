#include "model/tokenizer/onig_compat.h"

namespace specpipe::tokenizer {
namespace {

/// Unicode White_Space, as members of a bracketed class.
constexpr std::string_view kWhiteSpaceMembers =
    R"(\x{9}-\x{D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F})"
    R"(\x{205F}\x{3000})";
/// Its complement over all code points.
constexpr std::string_view kNonWhiteSpaceMembers =
    R"(\x{0}-\x{8}\x{E}-\x{1F}\x{21}-\x{84}\x{86}-\x{9F}\x{A1}-\x{167F}\x{1681}-\x{1FFF})"
    R"(\x{200B}-\x{2027}\x{202A}-\x{202E}\x{2030}-\x{205E}\x{2060}-\x{2FFF}\x{3001}-\x{10FFFF})";

/// Code points that Unicode 15.0-16.0 made letters (general category L*).
constexpr std::string_view kLettersSinceUnicode14 =
    R"(\x{1C89}-\x{1C8A}\x{A7CB}-\x{A7CD}\x{A7DA}-\x{A7DC}\x{105C0}-\x{105F3}\x{10D4A}-\x{10D65})"
    R"(\x{10D6F}-\x{10D85}\x{10EC2}-\x{10EC4}\x{1123F}-\x{11240}\x{11380}-\x{11389}\x{1138B})"
    R"(\x{1138E}\x{11390}-\x{113B5}\x{113B7}\x{113D1}\x{113D3}\x{11BC0}-\x{11BE0}\x{11F02})"
    R"(\x{11F04}-\x{11F10}\x{11F12}-\x{11F33}\x{1342F}\x{13441}-\x{13446}\x{13460}-\x{143FA})"
    R"(\x{16100}-\x{1611D}\x{16D40}-\x{16D6C}\x{18CFF}\x{1B132}\x{1B155}\x{1DF25}-\x{1DF2A})"
    R"(\x{1E030}-\x{1E06D}\x{1E4D0}-\x{1E4EB}\x{1E5D0}-\x{1E5ED}\x{1E5F0}\x{2B739})"
    R"(\x{2EBF0}-\x{2EE5D}\x{31350}-\x{323AF})";
/// Code points that Unicode 15.0-16.0 made numbers (general category N*).
constexpr std::string_view kNumbersSinceUnicode14 =
    R"(\x{10D40}-\x{10D49}\x{116D0}-\x{116E3}\x{11BF0}-\x{11BF9}\x{11F50}-\x{11F59})"
    R"(\x{16130}-\x{16139}\x{16D70}-\x{16D79}\x{1CCF0}-\x{1CCF9}\x{1D2C0}-\x{1D2D3})"
    R"(\x{1E4F0}-\x{1E4F9}\x{1E5F1}-\x{1E5FA})";

std::string bracketed(bool negated, std::string_view members) {
  std::string out(negated ? "[^" : "[");
  out.append(members);
  out.push_back(']');
  return out;
}

/// Reads a property escape \p{Name}, \p{^Name}, \pX or the \P forms at `pattern[pos]`
/// (which is the backslash). Returns its length (0 if malformed), the name and
/// whether it is negated.
size_t read_property(std::string_view pattern, size_t pos, std::string_view& name, bool& negated) {
  negated = pattern[pos + 1] == 'P';
  if (pos + 2 >= pattern.size()) return 0;
  if (pattern[pos + 2] != '{') {
    name = pattern.substr(pos + 2, 1);
    return 3;
  }
  const size_t close = pattern.find('}', pos + 3);
  if (close == std::string_view::npos) return 0;
  name = pattern.substr(pos + 3, close - pos - 3);
  if (name.starts_with('^')) {
    negated = !negated;
    name.remove_prefix(1);
  }
  return close + 1 - pos;
}

/// The replacement for a property escape, or empty to keep the escape as written.
std::string translate_property(std::string_view name, bool negated, bool in_class) {
  std::string_view additions;
  if (name == "L") additions = kLettersSinceUnicode14;
  if (name == "N") additions = kNumbersSinceUnicode14;
  if (additions.empty() || (negated && in_class)) return {};
  std::string members = "\\p{";
  members.append(name);
  members.push_back('}');
  members.append(additions);
  return in_class ? members : bracketed(negated, members);
}

}  // namespace

std::string translate_onig_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() * 2);
  bool in_class = false;
  size_t pos = 0;
  while (pos < pattern.size()) {
    const char c = pattern[pos];
    if (c == '\\' && pos + 1 < pattern.size()) {
      const char escaped = pattern[pos + 1];
      if (escaped == 'Q') {  // quoted text runs to \E and holds no syntax
        const size_t end = pattern.find("\\E", pos + 2);
        const size_t stop = end == std::string_view::npos ? pattern.size() : end + 2;
        out.append(pattern.substr(pos, stop - pos));
        pos = stop;
        continue;
      }
      if (escaped == 's' || escaped == 'S') {
        const bool negated = escaped == 'S';
        if (in_class) {
          out.append(negated ? kNonWhiteSpaceMembers : kWhiteSpaceMembers);
        } else {
          out.append(bracketed(negated, kWhiteSpaceMembers));
        }
        pos += 2;
        continue;
      }
      if (escaped == 'p' || escaped == 'P') {
        std::string_view name;
        bool negated = false;
        const size_t length = read_property(pattern, pos, name, negated);
        const std::string replacement =
            length == 0 ? std::string() : translate_property(name, negated, in_class);
        if (!replacement.empty()) {
          out.append(replacement);
          pos += length;
          continue;
        }
      }
      out.append(pattern.substr(pos, 2));  // any other escape, copied as written
      pos += 2;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      ++pos;
      if (pos < pattern.size() && pattern[pos] == '^') out.push_back(pattern[pos++]);
      if (pos < pattern.size() && pattern[pos] == ']') out.push_back(pattern[pos++]);  // literal
      continue;
    }
    if (in_class && c == '[' && pos + 1 < pattern.size() && pattern[pos + 1] == ':') {
      const size_t end = pattern.find(":]", pos + 2);
      if (end != std::string_view::npos) {  // a POSIX class such as [:alpha:]
        out.append(pattern.substr(pos, end + 2 - pos));
        pos = end + 2;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
    ++pos;
  }
  return out;
}

}  // namespace specpipe::tokenizer
