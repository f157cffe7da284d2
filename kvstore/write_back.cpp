#include "kvstore/write_back.h"

#include <algorithm>

namespace specpipe {

void WriteBackBatch::add(int32_t pool_block, int32_t host_block) {
  if (!runs_.empty()) {
    Run& last = runs_.back();
    if (last.pool_first + last.blocks == pool_block && last.host_first + last.blocks == host_block) {
      ++last.blocks;
      return;
    }
  }
  runs_.push_back({pool_block, host_block, 1});
}

int64_t WriteBackBatch::blocks() const {
  int64_t n = 0;
  for (const Run& r : runs_) n += r.blocks;
  return n;
}

bool WriteBackBatch::reads_pool(int32_t pool_block) const {
  return std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) {
    return pool_block >= r.pool_first && pool_block < r.pool_first + r.blocks;
  });
}

bool WriteBackBatch::writes_host(int32_t host_block) const {
  return std::any_of(runs_.begin(), runs_.end(), [&](const Run& r) {
    return host_block >= r.host_first && host_block < r.host_first + r.blocks;
  });
}

bool WriteBackBatch::writes_any(std::span<const int64_t> slots, int32_t block_size) const {
  if (runs_.empty() || block_size < 1) return false;
  int64_t last = -1;  // rows of a window share blocks: ask once per block in a row
  for (const int64_t slot : slots) {
    const int64_t block = slot / block_size;
    if (block == last) continue;
    last = block;
    if (reads_pool(static_cast<int32_t>(block))) return true;
  }
  return false;
}

}  // namespace specpipe
