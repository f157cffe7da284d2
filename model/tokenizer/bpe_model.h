#pragma once
/// The `model` of tokenizer.json when it is byte-level BPE: the vocabulary, the merge
/// ranks, and the merge loop that turns one pre-tokenised piece into ids. Options
/// that change the algorithm (dropout, byte_fallback, continuing_subword_prefix,
/// end_of_word_suffix, fuse_unk) and other model types are refused at load time.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/tokenizer/json_fields.h"
#include "model/tokenizer/piece_cache.h"

namespace specpipe::tokenizer {

class BpeModel {
 public:
  /// Reads the `model` node found at `path`. Throws Error(unsupported) for model types
  /// and options this engine does not implement, Error(corrupt_file) for merges that
  /// name tokens missing from the vocabulary.
  static BpeModel from_json(const Json& node, std::string_view path);

  /// Appends the ids of `piece` (raw bytes, non-empty) to `out`. Thread-safe.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  /// The id of a vocabulary entry (spelt in the ByteLevel alphabet).
  std::optional<int32_t> token_to_id(std::string_view token) const;

  /// The vocabulary entry with id `id`, or nullptr when no entry has it.
  const std::string* token_of(int32_t id) const;

  /// The number of vocabulary entries (less than id_limit() when ids have gaps).
  int32_t entry_count() const { return static_cast<int32_t>(vocab_.size()); }

  /// One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(tokens_by_id_.size()); }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };
  /// What merging an adjacent pair yields, and how early the merge applies.
  struct MergeResult {
    uint32_t rank;   ///< position in model.merges: lower merges first
    int32_t merged;  ///< id of the concatenated token
  };

  BpeModel() = default;
  void read_vocab(const Json& vocab, const std::string& path);
  void read_merges(const Json& merges, const std::string& path);
  std::vector<int32_t> merge_bytes(std::string_view piece) const;
  const MergeResult* find_merge(int32_t left, int32_t right) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::optional<std::string>> tokens_by_id_;
  std::array<int32_t, 256> byte_ids_{};               ///< id of the one-byte token of each byte
  std::unordered_map<uint64_t, MergeResult> merges_;  ///< key: left id << 32 | right id
  bool ignore_merges_ = false;  ///< a piece that is itself in the vocabulary skips merging
  std::unique_ptr<PieceCache> cache_;
};

}  // namespace specpipe::tokenizer
