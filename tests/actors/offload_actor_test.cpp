// The offload actor alone (a real CAF actor, no model): asked for room, it moves the
// oldest blocks of the longest sequence to the host tier and answers with the copy event.
// The pool hands the freed blocks out again at once; their next writer waits on that
// event (as the verifier does before its forward), so it writes only after the moves read
// them: the host tier holds the old K/V, and before the wait nothing had been copied.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <memory>
#include <vector>

#include "actors/offload_actor.h"
#include "kvstore/async_write_back.h"
#include "tests/kvstore/kv_pattern.h"
#include "tests/kvstore/manual_copy_stream.h"

namespace specpipe::actors {
namespace {

constexpr int32_t kTokens = 4;  // per block

TEST(OffloadActor, MovesAndAnswersWithTheEventTheNextWriterWaitsOn) {
  auto kv = std::make_shared<KvStore>(KvStoreConfig{
      .num_layers = 2, .num_kv_heads = 2, .head_dim = 3, .block_size = kTokens, .num_blocks = 4, .prefix_cache = false});
  const HostTierLayout layout{2, 2, 3, kTokens};
  auto tier = std::make_unique<HostKvTier>(layout, 8 * HostKvTier::block_bytes(layout));
  auto stream = std::make_shared<kvtest::ManualStream>();
  auto queue = std::make_shared<WriteBackQueue>(stream);
  HostTierCopier copier = async_host_copier(queue, kv->tensors(), *tier);
  kv->attach_host_tier(std::move(tier), std::move(copier));

  // Sequence a: 3 full committed blocks, one pool block left free.
  const std::vector<int32_t> tokens = kv_test::tokens_from(11, 3 * kTokens);
  const std::vector<uint64_t> keys = kv_test::prefix_keys(tokens);
  const SeqId a = kv->add_sequence({});
  kv->reserve(a, 3 * kTokens);
  kv_test::write_positions(*kv, a, 0, keys);
  kv->commit(a, tokens);
  ASSERT_EQ(kv->free_blocks(), 1);

  caf::actor_system_config config;
  config.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system system{config};
  auto stats = std::make_shared<OffloadActorStats>();
  auto offloader = system.spawn(offload, OffloadDeps{kv, queue, stats, OffloadPolicy::longest});
  PoolRoomDone done;
  {
    caf::scoped_actor self{system};
    self->request(offloader, caf::infinite, PoolRoomWork{3})
        .receive([&](const PoolRoomDone& d) { done = d; },
                 [&](const caf::error& e) { FAIL() << system.render(e); });
  }
  EXPECT_EQ(done.blocks_moved, 2);
  EXPECT_EQ(kv->free_blocks(), 3);  // released at once
  EXPECT_EQ(kv->host_blocks(a), 2);
  ASSERT_FALSE(done.fence.empty());
  EXPECT_EQ(stream->ran, 0u);  // the copies run beside, later

  // The next writer takes the freed blocks and waits on the event before writing.
  const SeqId b = kv->add_sequence({});
  kv->reserve(b, 3 * kTokens);
  EXPECT_TRUE(done.fence.wait());  // a stall: the moves had not run
  kv_test::write_positions(*kv, b, 0, kv_test::prefix_keys(kv_test::tokens_from(500, 3 * kTokens)));
  const HostKvTier& host = *kv->host_tier();
  const int64_t stride = host.slot_stride();
  for (int32_t pos = 0; pos < 2 * kTokens; ++pos) {
    const int64_t slot = int64_t{kv->host_block_table(a)[static_cast<size_t>(pos / kTokens)]} * kTokens + pos % kTokens;
    for (int32_t layer = 0; layer < 2; ++layer)
      for (int64_t e = 0; e < stride; ++e) {
        ASSERT_EQ(host.k(layer)[slot * stride + e], kv_test::pattern_value(keys[static_cast<size_t>(pos)], layer, 0, e))
            << "position " << pos;
        ASSERT_EQ(host.v(layer)[slot * stride + e], kv_test::pattern_value(keys[static_cast<size_t>(pos)], layer, 1, e))
            << "position " << pos;
      }
  }
  EXPECT_EQ(stats->room_requests.load(), 1);
  EXPECT_EQ(stats->room_moves.load(), 1);
  EXPECT_EQ(stats->blocks_moved.load(), 2);
  const nlohmann::json m = offload_actor_metrics(*stats, queue.get());
  EXPECT_EQ(m["copies_queued"].get<int64_t>(), 2);
  kv->check_invariants();
  caf::anon_send_exit(offloader, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace specpipe::actors
