#pragma once
/// A bounded, thread-safe memo of BPE results per pre-tokenised piece. Source code
/// repeats the same pieces ("self", "    ", " ="), so most pieces skip the merge loop.
/// Readers share a lock; once full, the cache stops growing (no eviction), which
/// keeps lookups lock-cheap and memory bounded.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace specpipe::tokenizer {

class PieceCache {
 public:
  /// Pieces longer than this are not cached: they are rare and would crowd it.
  static constexpr size_t kMaxPieceBytes = 64;

  explicit PieceCache(size_t capacity) : capacity_(capacity) {}

  /// Appends the cached ids of `piece` to `out` and returns true, or returns false.
  bool append_cached(std::string_view piece, std::vector<int32_t>& out) const;

  /// Remembers `ids` for `piece` while the cache has room.
  void remember(std::string_view piece, const std::vector<int32_t>& ids);

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
  };

  size_t capacity_;
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> entries_;
};

}  // namespace specpipe::tokenizer
