#pragma once
/// Reads the top level of a JSON object: enough for a plugin's config block without a
/// JSON library (a plugin links the SDK and the standard library only). Numbers are
/// read; strings, booleans, null, arrays and objects are recognised and skipped, so the
/// caller can name the key whose value has the wrong kind.
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace specpipe::scv {

struct JsonMember {
  enum class Kind { number, string, boolean, null, array, object };
  std::string key;
  Kind kind = Kind::null;
  double number = 0;  ///< the value when kind == number
};

/// "a number", "a string", ...: for error messages.
const char* json_kind_name(JsonMember::Kind kind);

/// Malformed JSON; what() says where ("offset 12: expected ':'").
class JsonSyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The members of the object `text` holds, in order (duplicates kept). Empty or
/// all-whitespace text is an empty object. Throws JsonSyntaxError for anything that is
/// not one JSON object, and for nesting deeper than 64 levels.
std::vector<JsonMember> parse_json_object(std::string_view text);

}  // namespace specpipe::scv
