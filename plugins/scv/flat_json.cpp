#include "flat_json.h"

#include <charconv>
#include <cstdint>

namespace specpipe::scv {
namespace {

constexpr int kMaxDepth = 64;

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  std::vector<JsonMember> top_level_object() {
    std::vector<JsonMember> members;
    skip_space();
    if (at_end()) return members;
    expect('{');
    skip_space();
    if (!consume('}')) {
      do {
        skip_space();
        JsonMember m;
        m.key = string();
        skip_space();
        expect(':');
        skip_space();
        read_value(m, 1);
        members.push_back(std::move(m));
        skip_space();
      } while (consume(','));
      expect('}');
    }
    skip_space();
    if (!at_end()) fail("unexpected text after the object");
    return members;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw JsonSyntaxError("offset " + std::to_string(pos_) + ": " + what);
  }
  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }
  bool consume(char c) {
    if (peek() != c || at_end()) return false;
    ++pos_;
    return true;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  void skip_space() {
    while (!at_end() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  void read_value(JsonMember& m, int depth) {
    const char c = peek();
    if (c == '"') {
      m.kind = JsonMember::Kind::string;
      string();
    } else if (c == '{' || c == '[') {
      m.kind = c == '{' ? JsonMember::Kind::object : JsonMember::Kind::array;
      skip_container(depth);
    } else if (c == 't' || c == 'f') {
      m.kind = JsonMember::Kind::boolean;
      literal(c == 't' ? "true" : "false");
    } else if (c == 'n') {
      m.kind = JsonMember::Kind::null;
      literal("null");
    } else {
      m.kind = JsonMember::Kind::number;
      m.number = number();
    }
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail("expected a value");
    pos_ += word.size();
  }

  /// JSON's number grammar, checked here because from_chars alone accepts more ("inf",
  /// leading zeros, a missing integer part).
  double number() {
    const size_t start = pos_;
    consume('-');
    if (!consume('0')) {  // a leading 0 stands alone
      if (!is_digit(peek())) fail("expected a value");
      digits();
    }
    if (consume('.')) {
      if (!is_digit(peek())) fail("expected a digit after '.'");
      digits();
    }
    if (consume('e') || consume('E')) {
      if (!consume('+')) consume('-');
      if (!is_digit(peek())) fail("expected a digit in the exponent");
      digits();
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, value);
    if (ec != std::errc() || end != text_.data() + pos_) fail("number out of range");
    return value;
  }
  static bool is_digit(char c) { return c >= '0' && c <= '9'; }
  void digits() {
    while (is_digit(peek())) ++pos_;
  }

  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_end()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, code_point()); break;
        default: fail("bad escape in a string");
      }
    }
  }

  uint32_t hex4() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      uint32_t d;
      if (c >= '0' && c <= '9') d = static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<uint32_t>(c - 'A' + 10);
      else fail("bad \\u escape");
      v = v * 16 + d;
      ++pos_;
    }
    return v;
  }
  /// After "\u": one code point, joining a surrogate pair.
  uint32_t code_point() {
    const uint32_t hi = hex4();
    if (hi < 0xD800 || hi > 0xDBFF) return hi;
    if (!consume('\\') || !consume('u')) return 0xFFFD;
    const uint32_t lo = hex4();
    if (lo < 0xDC00 || lo > 0xDFFF) return 0xFFFD;
    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  }
  static void append_utf8(std::string& out, uint32_t cp) {
    auto byte = [&](uint32_t b) { out += static_cast<char>(b); };
    if (cp < 0x80) {
      byte(cp);
    } else if (cp < 0x800) {
      byte(0xC0 | (cp >> 6));
      byte(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      byte(0xE0 | (cp >> 12));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    } else {
      byte(0xF0 | (cp >> 18));
      byte(0x80 | ((cp >> 12) & 0x3F));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    }
  }

  /// Skips an array or object, checking its syntax; depth bounds the recursion.
  void skip_container(int depth) {
    if (depth > kMaxDepth) fail("nested too deeply");
    const bool object = peek() == '{';
    const char close = object ? '}' : ']';
    ++pos_;
    skip_space();
    if (consume(close)) return;
    do {
      skip_space();
      JsonMember ignored;
      if (object) {
        string();
        skip_space();
        expect(':');
        skip_space();
      }
      read_value(ignored, depth + 1);
      skip_space();
    } while (consume(','));
    expect(close);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

const char* json_kind_name(JsonMember::Kind kind) {
  switch (kind) {
    case JsonMember::Kind::number: return "a number";
    case JsonMember::Kind::string: return "a string";
    case JsonMember::Kind::boolean: return "a boolean";
    case JsonMember::Kind::null: return "null";
    case JsonMember::Kind::array: return "an array";
    case JsonMember::Kind::object: return "an object";
  }
  return "a value";
}

std::vector<JsonMember> parse_json_object(std::string_view text) { return Reader(text).top_level_object(); }

}  // namespace specpipe::scv
