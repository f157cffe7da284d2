// Blocks leaving the pool, written back to the host tier beside the compute
// (kvstore/write_back.h): the batch's runs and conflict questions, and the layer ring
// carrying the write-back - layer l copied in layer l's job ahead of its load, and a
// forward that reuses a pool block of the batch writing it only after that copy (the
// seed's "async offload causes memory reuse bugs": the test shows the race without the
// fence and its absence with it, on a manual stream and on the real copy thread).
#include "kvstore/write_back.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "kvstore/copy_stream.h"
#include "kvstore/host_tier.h"
#include "kvstore/layer_ring.h"
#include "tests/kvstore/manual_copy_stream.h"

namespace specpipe::write_back_test {

TEST(WriteBackBatch, MergesConsecutiveMovesIntoRunsAndAnswersConflicts) {
  WriteBackBatch b;
  EXPECT_TRUE(b.empty());
  b.add(7, 0);
  b.add(8, 1);
  b.add(9, 2);
  b.add(3, 3);  // the pool block does not follow: a new run
  b.add(4, 9);  // nor does the host block
  ASSERT_EQ(b.runs().size(), 3u);
  EXPECT_EQ(b.runs()[0].pool_first, 7);
  EXPECT_EQ(b.runs()[0].blocks, 3);
  EXPECT_EQ(b.blocks(), 5);
  EXPECT_TRUE(b.reads_pool(9));
  EXPECT_FALSE(b.reads_pool(10));
  EXPECT_TRUE(b.writes_host(9));
  EXPECT_FALSE(b.writes_host(4));
  const std::vector<int64_t> clear_slots{0, 1, 2, 40, 41}, reuse{160, 161, 50};  // block size 16
  EXPECT_FALSE(b.writes_any(clear_slots, 16));
  EXPECT_TRUE(b.writes_any(reuse, 16));  // slot 50 is in block 3
  b.clear();
  EXPECT_TRUE(b.empty());
  EXPECT_FALSE(b.writes_any(reuse, 16));
}

using kvtest::ManualStream;

constexpr int32_t kLayers = 4;
const HostTierLayout kLayout{kLayers, 2, 4, 4};  // 32 floats a block and layer

/// A pool of `blocks` blocks per layer (K only: V goes the same way) and the forward's
/// side of a write-back: pool block `pool_block` moves to host block 0 while the next
/// forward reuses it. value(layer, generation) tells the old K/V from the new.
struct Scene {
  static float value(int32_t layer, int32_t generation) { return static_cast<float>(layer * 10 + generation); }
  HostKvTier tier{kLayout, 2 * HostKvTier::block_bytes(kLayout)};
  std::vector<std::vector<float>> pool;
  int32_t pool_block = 1;
  std::chrono::milliseconds copy_delay{0};
  Scene() {
    tier.allocate();  // host block 0: the destination
    pool.assign(kLayers, std::vector<float>(static_cast<size_t>(3 * tier.block_floats()), 0.0f));
    for (int32_t l = 0; l < kLayers; ++l)
      std::fill_n(pool[static_cast<size_t>(l)].begin() + pool_block * tier.block_floats(), tier.block_floats(),
                  value(l, 1));
  }
  LayerRing::WriteBack write_back() {
    return [this](int32_t layer) {
      std::this_thread::sleep_for(copy_delay);  // a slow copy: the compute side runs ahead
      const float* src = pool[static_cast<size_t>(layer)].data() + pool_block * tier.block_floats();
      std::copy_n(src, tier.block_floats(), tier.k(layer));
      std::copy_n(src, tier.block_floats(), tier.v(layer));
    };
  }
  /// The forward: per layer, (fence,) overwrite the reused block with generation 2, read the slot.
  void forward(LayerRing& ring, bool fence, std::vector<float>& loaded) {
    const std::vector<int32_t> table{0};  // the forward streams host block 0
    const std::span<const int32_t> tables[] = {table};
    ring.begin(tier, tables, kLayers, write_back(), fence);
    for (int32_t l = 0; l < kLayers; ++l) {
      ring.before_write(l);
      std::fill_n(pool[static_cast<size_t>(l)].begin() + pool_block * tier.block_floats(), tier.block_floats(),
                  value(l, 2));
      loaded.push_back(ring.acquire(l).k[5]);
      ring.release(l);
    }
    ring.finish();
  }
};

// Layer l's write-back runs in layer l's job, ahead of its load: the slot gets the
// blocks just written back; with the fence, the reused pool block's old K/V reach the
// host tier, every layer; without it the forward's new K/V overwrite them first (the
// race the test exists to see).
TEST(LayerRingWriteBack, TheFenceKeepsAReusedBlocksOldKvForTheHostTier) {
  for (const bool fence : {true, false}) {
    Scene scene;
    auto stream = std::make_unique<ManualStream>();
    ManualStream& jobs = *stream;
    LayerRing ring(2, std::move(stream));
    std::vector<float> loaded;
    scene.forward(ring, fence, loaded);
    EXPECT_EQ(jobs.jobs.size(), static_cast<size_t>(kLayers));  // one job a layer: write-back + load
    for (int32_t l = 0; l < kLayers; ++l) {
      const float want = Scene::value(l, fence ? 1 : 2);
      EXPECT_EQ(scene.tier.k(l)[5], want) << "fence " << fence << " layer " << l;
      EXPECT_EQ(scene.tier.v(l)[5], want);
      EXPECT_EQ(loaded[static_cast<size_t>(l)], want);  // the load read what was written back
    }
  }
}

// The same on the CPU backend's real copy thread with slow copies (the compute side
// runs ahead of them) and in line (the seed's synchronous way): the host tier gets the
// old K/V every time, forward after forward.
TEST(LayerRingWriteBack, TheCopyThreadAndTheInlineStreamWriteBackTheOldKv) {
  for (const bool overlap : {true, false}) {
    Scene scene;
    scene.copy_delay = std::chrono::milliseconds(2);
    LayerRing ring(2, overlap ? nullptr : std::make_unique<InlineCopyStream>());
    for (int forward = 0; forward < 3; ++forward) {
      for (int32_t l = 0; l < kLayers; ++l)  // the block holds generation 1 again
        std::fill_n(scene.pool[static_cast<size_t>(l)].begin() + scene.pool_block * scene.tier.block_floats(),
                    scene.tier.block_floats(), Scene::value(l, 1));
      std::vector<float> loaded;
      scene.forward(ring, /*fence=*/true, loaded);
      for (int32_t l = 0; l < kLayers; ++l) {
        EXPECT_EQ(scene.tier.k(l)[31], Scene::value(l, 1)) << "overlap " << overlap << " layer " << l;
        EXPECT_EQ(loaded[static_cast<size_t>(l)], Scene::value(l, 1));
      }
    }
    EXPECT_EQ(ring.stats().loads, 3 * kLayers);
  }
}

// No write-back given: before_write is free and the ring loads as before.
TEST(LayerRingWriteBack, WithoutAWriteBackBeforeWriteDoesNothing) {
  HostKvTier tier(kLayout, HostKvTier::block_bytes(kLayout));
  tier.allocate();
  auto stream = std::make_unique<ManualStream>();
  ManualStream& jobs = *stream;
  LayerRing ring(2, std::move(stream));
  const std::vector<int32_t> table{0};
  const std::span<const int32_t> tables[] = {table};
  ring.begin(tier, tables, kLayers, {}, /*fence_writes=*/true);
  EXPECT_FALSE(ring.before_write(0));
  EXPECT_EQ(jobs.ran, 0u);  // nothing waited for
  ring.abandon();
}

}  // namespace specpipe::write_back_test
