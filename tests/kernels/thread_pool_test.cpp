#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace specpipe::cpu {
namespace {

// Guided chunks: every index once, each chunk starting at a multiple of the grain and no
// shorter than it (but the range's last), the first chunks longer than the last.
TEST(ThreadPool, GuidedChunksCoverTheRangeOnceInWholeGrainsThatShrink) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (int64_t count : {1, 7, 8, 9, 64, 65, 512, 1000}) {
      for (int64_t grain : {1, 8}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(count));
        std::mutex m;
        std::vector<std::pair<int64_t, int64_t>> chunks;
        parallel_for_guided(count, grain, [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
          std::lock_guard lock(m);
          chunks.emplace_back(begin, end);
        });
        for (int64_t i = 0; i < count; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << count << " " << i;
        std::sort(chunks.begin(), chunks.end());
        for (const auto& [begin, end] : chunks) {
          EXPECT_EQ(begin % grain, 0) << "count " << count << " grain " << grain;
          if (end != count) {
            EXPECT_GE(end - begin, grain);
          }
        }
        if (count >= 64 * grain && threads > 1) {
          EXPECT_GT(chunks.front().second - chunks.front().first, chunks.back().second - chunks.back().first);
          EXPECT_LE(chunks.back().second - chunks.back().first, grain);
        }
      }
    }
  }
  set_num_threads(0);
}

}  // namespace
}  // namespace specpipe::cpu
