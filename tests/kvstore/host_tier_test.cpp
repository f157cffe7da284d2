// The host tier's memory and sizing, the CPU copy stream, and the layer ring: which
// layer is in which slot when, what a slot holds, and its error cases.
#include "kvstore/host_tier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "core/error.h"
#include "kvstore/copy_stream.h"
#include "kvstore/layer_ring.h"
#include "tests/kvstore/manual_copy_stream.h"

namespace specpipe::host_tier_test {

HostTierLayout layout(int32_t layers = 3) { return {layers, 2, 4, 4}; }  // 2 * 3 * 4 * 8 floats = 768 bytes a block

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Counts what it hands out; fails on demand.
class CountingAllocator final : public HostMemoryAllocator {
 public:
  bool refuse = false;
  int64_t outstanding = 0;
  void* allocate(size_t bytes) override {
    if (refuse) return nullptr;
    ++outstanding;
    return default_host_allocator().allocate(bytes);
  }
  void release(void* memory, size_t bytes) override {
    if (memory) --outstanding;
    default_host_allocator().release(memory, bytes);
  }
};

TEST(HostKvTier, HoldsTheBlocksItsBytesHold) {
  EXPECT_EQ(HostKvTier::block_bytes(layout()), 2 * 3 * 4 * 2 * 4 * 4);
  HostKvTier tier(layout(), 10 * 768 + 700);
  EXPECT_EQ(tier.total_blocks(), 10);
  EXPECT_EQ(tier.free_blocks(), 10);
  EXPECT_EQ(tier.bytes(), 10 * 768);
  const int32_t a = tier.allocate();
  EXPECT_TRUE(tier.in_use(a));
  EXPECT_EQ(tier.used_blocks(), 1);
  tier.release(a);
  EXPECT_EQ(tier.free_blocks(), 10);
  // Layer l's K and V are separate [blocks, block_size, kv_heads, head_dim] tensors.
  EXPECT_EQ(tier.v(0) - tier.k(0), 10 * tier.block_floats());
  EXPECT_EQ(tier.k(1) - tier.k(0), 2 * 10 * tier.block_floats());
}

TEST(HostKvTier, Bf16TierHalvesTheBytesAndRefusesFloatAccess) {
  HostTierLayout l = layout();
  l.dtype = DType::bf16;
  EXPECT_EQ(HostKvTier::block_bytes(l), 384);  // half the f32 tier's 768
  HostKvTier tier(l, 10 * 384);
  EXPECT_EQ(tier.total_blocks(), 10);
  EXPECT_EQ(tier.element_bytes(), 2);
  EXPECT_EQ(static_cast<const char*>(tier.v_data(0)) - static_cast<const char*>(tier.k_data(0)),
            10 * tier.block_tensor_bytes());
  EXPECT_EQ(static_cast<const char*>(tier.k_data(1)) - static_cast<const char*>(tier.k_data(0)),
            2 * 10 * tier.block_tensor_bytes());
  // Its elements are not floats: the float view is one clear error.
  try {
    tier.k(0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(e.what(), "its K/V are BF16, not F32")) << e.what();
  }
  l.dtype = DType::i32;
  EXPECT_THROW(HostKvTier::block_bytes(l), Error);
}

TEST(HostKvTier, TooFewBytesAndBadLayoutsAreRefused) {
  try {
    HostKvTier tier(layout(), 767);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_TRUE(contains(e.what(), "host_bytes: 767 bytes hold no KV block of 768 bytes")) << e.what();
  }
  HostTierLayout bad = layout();
  bad.head_dim = 0;
  EXPECT_THROW(HostKvTier(bad, 1 << 20), Error);
}

TEST(HostKvTier, AllocationFailureIsOneClearErrorWithNothingHeld) {
  CountingAllocator allocator;
  allocator.refuse = true;
  try {
    HostKvTier tier(layout(), 100 * 768, &allocator);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
    EXPECT_TRUE(contains(e.what(), "cannot allocate 76800 bytes of host memory")) << e.what();
  }
  EXPECT_EQ(allocator.outstanding, 0);
  allocator.refuse = false;
  {
    HostKvTier tier(layout(), 100 * 768, &allocator);
    EXPECT_EQ(allocator.outstanding, 1);
  }
  EXPECT_EQ(allocator.outstanding, 0);
}

TEST(HostKvTier, RunningOutIsOutOfCapacity) {
  HostKvTier tier(layout(), 2 * 768);
  tier.allocate();
  tier.allocate();
  try {
    tier.allocate();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
  }
}

TEST(ThreadCopyStream, RunsJobsInOrderAndReportsTheirErrors) {
  ThreadCopyStream stream;
  std::vector<int> order;
  CopyStream::Ticket last = 0;
  for (int i = 0; i < 100; ++i) last = stream.enqueue([&order, i] { order.push_back(i); });
  stream.wait(last);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  const CopyStream::Ticket bad = stream.enqueue([] { throw Error(ErrorCode::io, "copy failed"); });
  const CopyStream::Ticket after = stream.enqueue([&order] { order.push_back(100); });
  EXPECT_THROW(stream.wait(bad), Error);
  stream.wait(after);  // the error was reported once; later jobs still ran
  EXPECT_EQ(order.size(), 101u);
  stream.synchronize();
}

using kvtest::ManualStream;

/// Fills every host block's K with (layer, block, element) and V with its negation.
void fill(HostKvTier& tier) {
  const int64_t n = tier.block_floats();
  for (int32_t layer = 0; layer < tier.layout().num_layers; ++layer)
    for (int32_t b = 0; b < tier.total_blocks(); ++b)
      for (int64_t e = 0; e < n; ++e) {
        tier.k(layer)[b * n + e] = static_cast<float>(layer * 100000 + b * 1000 + e);
        tier.v(layer)[b * n + e] = -static_cast<float>(layer * 100000 + b * 1000 + e);
      }
}

TEST(LayerRing, FewerThanTwoSlotsIsAnError) {
  for (int32_t slots : {-1, 0, 1}) {
    try {
      LayerRing ring(slots);
      ADD_FAILURE() << "no error for " << slots;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_TRUE(contains(e.what(), "ring_slots must be >= 2")) << e.what();
    }
  }
}

// Each slot gets its layer's host blocks of every sequence, in position order, at the
// sequence's offset; layer l + N is queued only once layer l's slot is released.
TEST(LayerRing, GathersEachLayerAfterItsSlotIsReleased) {
  for (int32_t slots : {2, 3, 5}) {
    HostKvTier tier(layout(4), 8 * HostKvTier::block_bytes(layout(4)));
    for (int i = 0; i < 6; ++i) tier.allocate();
    fill(tier);
    auto stream = std::make_unique<ManualStream>();
    ManualStream& jobs = *stream;
    LayerRing ring(slots, std::move(stream));
    const std::vector<int32_t> a{4, 1, 3}, b{}, c{0, 5};
    const std::span<const int32_t> tables[] = {a, b, c};
    ring.begin(tier, tables, 4);
    EXPECT_EQ(jobs.jobs.size(), static_cast<size_t>(std::min(slots, 4)));
    EXPECT_EQ(ring.tokens(), 5 * 4);
    EXPECT_EQ(ring.offset(0), 0);
    EXPECT_EQ(ring.offset(1), 12);
    EXPECT_EQ(ring.offset(2), 12);
    const int64_t n = tier.block_floats();
    for (int32_t layer = 0; layer < 4; ++layer) {
      const RingSlot slot = ring.acquire(layer);
      for (size_t s = 0; s < 3; ++s) {
        const std::vector<int32_t>& table = s == 0 ? a : s == 1 ? b : c;
        for (size_t i = 0; i < table.size(); ++i)
          for (int64_t e = 0; e < n; ++e) {
            const int64_t at = ring.offset(s) * tier.slot_stride() + static_cast<int64_t>(i) * n + e;
            ASSERT_EQ(slot.k[at], static_cast<float>(layer * 100000 + table[i] * 1000 + e));
            ASSERT_EQ(slot.v[at], -static_cast<float>(layer * 100000 + table[i] * 1000 + e));
          }
      }
      const size_t queued = jobs.jobs.size();
      EXPECT_EQ(queued, static_cast<size_t>(std::min(4, layer + slots)));
      ring.release(layer);
      EXPECT_EQ(jobs.jobs.size(), static_cast<size_t>(std::min(4, layer + 1 + slots)));
    }
    ring.finish();
    const RingStats stats = ring.stats();
    EXPECT_EQ(stats.loads, 4);
    EXPECT_EQ(stats.bytes_loaded, 4 * 5 * 2 * n * 4);
    EXPECT_EQ(stats.stalls, 4);  // nothing runs ahead on a manual stream
  }
}

// The copy thread (overlap) and the inline stream (no overlap: the copies run in
// release()) load the same bytes, forward after forward.
TEST(LayerRing, TheCopyThreadAndTheInlineStreamLoadTheSameBytes) {
  for (const bool overlap : {true, false}) {
    HostKvTier tier(layout(6), 4 * HostKvTier::block_bytes(layout(6)));
    for (int i = 0; i < 4; ++i) tier.allocate();
    fill(tier);
    LayerRing ring(2, overlap ? nullptr : std::make_unique<InlineCopyStream>());
    const std::vector<int32_t> a{3, 0, 2, 1};
    const std::span<const int32_t> tables[] = {a};
    for (int forward = 0; forward < 3; ++forward) {
      ring.begin(tier, tables, 6);
      for (int32_t layer = 0; layer < 6; ++layer) {
        const RingSlot slot = ring.acquire(layer);
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(slot.k[static_cast<int64_t>(i) * tier.block_floats() + 7],
                    static_cast<float>(layer * 100000 + a[i] * 1000 + 7));
        ring.release(layer);
      }
      ring.finish();
    }
    EXPECT_EQ(ring.stats().forwards, 3);
    EXPECT_EQ(ring.stats().loads, 18);
    if (!overlap) {
      EXPECT_EQ(ring.stats().stalls, 0);  // nothing is ever pending
    }
  }
}

TEST(LayerRing, RefusesBlocksTheTierDoesNotHoldAndOutOfOrderUse) {
  HostKvTier tier(layout(), 4 * 768);
  const int32_t held = tier.allocate();
  LayerRing ring(2);
  const std::vector<int32_t> bad{held, 3};
  const std::span<const int32_t> tables[] = {bad};
  EXPECT_THROW(ring.begin(tier, tables, 3), Error);
  EXPECT_FALSE(ring.active());
  const std::vector<int32_t> good{held};
  const std::span<const int32_t> ok[] = {good};
  EXPECT_THROW(ring.begin(tier, ok, 4), Error);  // more layers than the tier
  ring.begin(tier, ok, 3);
  EXPECT_THROW(ring.begin(tier, ok, 3), Error);  // still open
  EXPECT_THROW(ring.acquire(2), Error);          // layer 2 is not loaded before 0 is released
  ring.abandon();
  EXPECT_FALSE(ring.active());
}

}  // namespace specpipe::host_tier_test
