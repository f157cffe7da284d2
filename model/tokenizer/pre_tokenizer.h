#pragma once
/// The `pre_tokenizer` of tokenizer.json: zero or more Split steps (behaviour
/// "Isolated", invert false) followed by one ByteLevel step, alone or in a Sequence.
/// It cuts a normalised text segment into the pieces that BPE encodes one at a time;
/// BPE never merges across pieces. Anything else is refused at load time.
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/split_pattern.h"

namespace specpipe::tokenizer {

/// The pieces of one segment, as raw bytes (not yet in the ByteLevel alphabet).
struct PieceList {
  std::vector<std::string_view> pieces;  ///< views into the segment or into `owned`
  std::deque<std::string> owned;         ///< pieces that gained a prefix space
  void clear() {
    pieces.clear();
    owned.clear();
  }
};

class PreTokenizer {
 public:
  /// Reads the `pre_tokenizer` node found at `path`; throws Error(unsupported) naming
  /// the path and value of any component or option this engine does not implement.
  static PreTokenizer from_json(const Json& node, std::string_view path);

  /// Replaces `out` with the pieces of `segment` (valid UTF-8, non-empty). The views
  /// in `out.pieces` stay valid while `segment` and `out` live.
  void split(std::string_view segment, PieceList& out) const;

 private:
  PreTokenizer() = default;
  void append_steps(const Json& node, const std::string& path);
  void read_split(const Json& node, const std::string& path);
  void read_byte_level(const Json& node, const std::string& path);

  std::vector<SplitPattern> split_steps_;  ///< the Split steps, in order
  bool has_byte_level_ = false;
  bool add_prefix_space_ = false;               ///< ByteLevel: prepend ' ' to pieces lacking one
  std::vector<SplitPattern> byte_level_regex_;  ///< ByteLevel use_regex: GPT-2's regex
};

}  // namespace specpipe::tokenizer
