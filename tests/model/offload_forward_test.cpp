// The host tier in the CPU forward (issue 16 item 6): a prefix whose oldest blocks were
// offloaded streams through the layer ring and gives the same logits, bit for bit, as
// the all-in-pool forward; plain greedy decoding of the long golden prompts through a
// pool far smaller than the prompt (offload during prefill and decode) gives the golden
// continuations; both tiers are empty afterwards.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "core/error.h"
#include "kvstore/host_tier.h"
#include "pipeline/plain_generator.h"
#include "pipeline/prefill.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

std::unique_ptr<HostKvTier> host_tier_for(const KvStore& kv, int32_t blocks) {
  const KvStoreConfig& c = kv.config();
  const HostTierLayout layout{c.num_layers, c.num_kv_heads, c.head_dim, c.block_size};
  return std::make_unique<HostKvTier>(layout, blocks * HostKvTier::block_bytes(layout));
}

/// Logits of every row of one forward of `windows`-many sequences, flattened.
std::vector<float> forward_rows(Transformer& m, KvStore& kv, std::span<const ForwardWindow> windows) {
  DirectKvWriter writer(kv);
  Logits logits;
  for (const ForwardWindow& w : windows) kv.reserve(w.seq, kv.length(w.seq) + static_cast<int32_t>(w.tokens.size()));
  m.forward(windows, kv, writer, logits);
  std::vector<float> rows;
  for (size_t w = 0; w < windows.size(); ++w)
    for (int32_t i = 0; i < logits.rows(w); ++i) rows.insert(rows.end(), logits.row(w, i).begin(), logits.row(w, i).end());
  return rows;
}

TEST(OffloadForward, LogitsOfAnOffloadedPrefixAreBitIdentical) {
  Transformer& m = test::model("demo-target");
  const auto long_prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> a(long_prompt.begin(), long_prompt.begin() + 203);
  const std::vector<int32_t> b(long_prompt.begin() + 500, long_prompt.begin() + 561);
  const std::vector<int32_t> window(long_prompt.begin() + 203, long_prompt.begin() + 208);
  Logits logits;

  // All in the pool: sequence a's verify window alone, then beside b's.
  KvStore pooled(m.kv_config(64));
  const SeqId pa = pooled.add_sequence({});
  prefill(m, pooled, pa, a, 64, logits);
  const SeqId pb = pooled.add_sequence({});
  prefill(m, pooled, pb, b, 64, logits);
  const std::vector<float> want = forward_rows(m, pooled, std::array{ForwardWindow{pa, window, LogitsMode::all}});
  pooled.truncate(pa, pooled.length(pa));
  const std::vector<float> want_batch = forward_rows(
      m, pooled, std::array{ForwardWindow{pb, window, LogitsMode::all}, ForwardWindow{pa, window, LogitsMode::all}});

  for (const auto& [slots, overlap] : {std::pair{2, true}, std::pair{3, true}, std::pair{9, true}, std::pair{2, false}}) {
    m.enable_layer_ring(slots, overlap);
    for (int32_t offloaded : {1, 6, 12}) {  // 12 = every full block of a
      KvStore kv(m.kv_config(64));
      kv.attach_host_tier(host_tier_for(kv, 16));
      const SeqId sa = kv.add_sequence({});
      prefill(m, kv, sa, a, 64, logits);
      const SeqId sb = kv.add_sequence({});
      prefill(m, kv, sb, b, 64, logits);
      kv.offload_prefix(sa, offloaded);
      kv.offload_prefix(sb, 1);
      kv.check_invariants();
      const std::vector<float> got = forward_rows(m, kv, std::array{ForwardWindow{sa, window, LogitsMode::all}});
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)))
          << slots << " slots, overlap " << overlap << ", " << offloaded << " blocks offloaded";
      kv.truncate(sa, kv.length(sa));
      const std::vector<float> got_batch = forward_rows(
          m, kv, std::array{ForwardWindow{sb, window, LogitsMode::all}, ForwardWindow{sa, window, LogitsMode::all}});
      EXPECT_EQ(0, std::memcmp(got_batch.data(), want_batch.data(), got_batch.size() * sizeof(float)))
          << slots << " slots, " << offloaded << " blocks offloaded, batched";
      kv.release(sa);
      kv.release(sb);
      kv.check_invariants();
      EXPECT_EQ(kv.host_tier()->free_blocks(), kv.host_tier()->total_blocks());
    }
  }
  EXPECT_GT(m.ring_stats().loads, 0);
}

TEST(OffloadForward, RingSlotsBelowTwoAreRefused) {
  Transformer& m = test::model("demo-draft");
  try {
    m.enable_layer_ring(1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("ring_slots must be >= 2"), std::string::npos) << e.what();
  }
}

// Each long golden prompt (3,000 and 7,000 tokens) through a pool of 512 tokens: the
// prefill and every decode step stream the offloaded blocks through the ring.
TEST(OffloadForward, LongPromptsThroughATinyPoolGiveTheGoldenContinuation) {
  Transformer& m = test::model("demo-target");
  m.enable_layer_ring(2);
  for (const auto& c : test::golden_long()["cases"]) {
    const auto prompt = test::ids(c["prompt_ids"]);
    const auto want = test::ids(c["target_greedy_64"]);
    KvStore kv(m.kv_config(32));
    kv.attach_host_tier(host_tier_for(kv, static_cast<int32_t>((prompt.size() + want.size()) / 16 + 1)));
    PlainGenerator gen(m, kv, 256);
    GenerationParams params;
    params.max_tokens = static_cast<int32_t>(want.size());
    params.stop_at_eos = false;
    const RingStats before = m.ring_stats();
    EXPECT_EQ(gen.generate(prompt, params).tokens, want) << prompt.size() << "-token prompt";
    EXPECT_GT(kv.offload_stats().bytes_to_host, 0);
    EXPECT_GT(m.ring_stats().bytes_loaded, before.bytes_loaded);
    kv.check_invariants();
    EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
    EXPECT_EQ(kv.host_tier()->free_blocks(), kv.host_tier()->total_blocks());
  }
}

// Beyond both tiers: one out_of_capacity error, before any work, naming both.
TEST(OffloadForward, AContextBeyondBothTiersIsOneClearError) {
  Transformer& m = test::model("demo-target");
  m.enable_layer_ring(2);
  const auto prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  KvStore kv(m.kv_config(32));
  kv.attach_host_tier(host_tier_for(kv, 64));
  PlainGenerator gen(m, kv, 256);
  GenerationParams params;
  params.max_tokens = 4;
  try {
    gen.generate(prompt, params);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::out_of_capacity);
    EXPECT_NE(std::string(e.what()).find("on the host tier"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kv.num_sequences(), 0u);
  EXPECT_EQ(kv.host_tier()->free_blocks(), 64);
}

}  // namespace
}  // namespace specpipe
