#pragma once
// Shared by the offload engine tests: the demo pair with a tiny target pool and a host
// tier, and the check that both tiers drained after offload really happened.
#include <gtest/gtest.h>

#include <ostream>

#include "tests/support/engine.h"
#include "tests/support/test_paths.h"

namespace specpipe::test {

struct Strategy {
  const char* name;
  DrafterKind drafter;
  bool nwor, scv;
};

inline void PrintTo(const Strategy& s, std::ostream* os) { *os << s.name; }

/// The demo pair with a 256-token target pool and an 8 MiB host tier (64 blocks).
inline PipelineConfig offload_config(const Strategy& s) {
  PipelineConfig c = test::demo_engine_config(4);
  c.drafter.type = s.drafter;
  c.drafter.max_gamma = 8;
  c.drafter.draft_ahead = DraftAhead::off;
  c.kv.tokens = 256;
  c.offload.enable = true;
  c.offload.host_bytes = int64_t{8} << 20;
  c.offload.ring_slots = 3;
  if (s.nwor) {
    c.plugins.push_back({"nwor", plugin_library(NWOR_PLUGIN_PATH), "{}"});  // by name from a GPU bundle
    c.slots.kv_write = "nwor";
  }
  if (s.scv) {
    c.plugins.push_back({"scv", plugin_library(SCV_PLUGIN_PATH), "{}"});
    c.slots.verify_plan = "scv";
  }
  return c;
}

/// Both tiers empty, no sequence left, and offload really happened.
inline void expect_drained_after_offload(actors::Engine& engine) {
  const KvOccupancy kv = engine.kv_occupancy();
  EXPECT_EQ(kv.free_blocks, kv.total_blocks);
  EXPECT_EQ(kv.host_free_blocks, kv.host_total_blocks);
  EXPECT_GT(kv.host_total_blocks, 0);
  EXPECT_EQ(kv.sequences, 0u);
  const nlohmann::json m = engine.strategy_metrics();
  ASSERT_TRUE(m.contains("offload")) << m.dump();
  EXPECT_GT(m["offload"]["bytes_to_host"].get<int64_t>(), 0) << m.dump();
  EXPECT_GT(m["offload"]["ring_loads"].get<int64_t>(), 0) << m.dump();
  // The moves were the offload actor's (the kv-router asked it for room), and on the CPU
  // with overlap they ran on its copy thread.
  ASSERT_TRUE(m["offload"].contains("actor")) << m.dump();
  const nlohmann::json& a = m["offload"]["actor"];
  EXPECT_GT(a["room_moves"].get<int64_t>(), 0) << m.dump();
  // Blocks booked on the host by layer-wise prefills were never in the pool.
  EXPECT_EQ(a["blocks_moved"].get<int64_t>() + m["offload"]["layerwise_host_blocks"].get<int64_t>(),
            m["offload"]["blocks_to_host"].get<int64_t>())
      << m.dump();
  if (a["async_copies"].get<bool>()) {
    EXPECT_EQ(a["copies_queued"].get<int64_t>(), a["blocks_moved"].get<int64_t>()) << m.dump();
  }
}

}  // namespace specpipe::test
