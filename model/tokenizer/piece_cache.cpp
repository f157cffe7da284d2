#include "model/tokenizer/piece_cache.h"

#include <mutex>

namespace specpipe::tokenizer {

bool PieceCache::append_cached(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > kMaxPieceBytes) return false;
  const std::shared_lock lock(mutex_);
  const auto it = entries_.find(piece);
  if (it == entries_.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void PieceCache::remember(std::string_view piece, const std::vector<int32_t>& ids) {
  if (piece.size() > kMaxPieceBytes) return;
  const std::unique_lock lock(mutex_);
  if (entries_.size() >= capacity_) return;
  entries_.try_emplace(std::string(piece), ids);
}

}  // namespace specpipe::tokenizer
