// Layer-wise prefill on the CPU engine (issue 16 items 5-6): the whole prompt one layer at
// a time, the host part of each layer's K/V copied to the host tier on a copy thread
// (LayerPrefillWriter) while the next layer computes. Its last logits and every layer's
// K/V (host tier and pool) are the same bits as a chunked prefill with every block in the
// pool, with the copies on the thread or in line; decoding after it through the ring
// gives the golden continuations.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "kvstore/host_tier.h"
#include "kvstore/layer_prefill_writer.h"
#include "pipeline/prefill.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

constexpr int32_t kBlock = 16;

/// Layer `layer`'s K and V of positions [0, n) of `seq`, from the host tier or the pool.
std::vector<float> layer_rows(const KvStore& kv, SeqId seq, int32_t layer, int32_t n) {
  const int64_t stride = kv.tensors().slot_stride();
  const int32_t host_end = kv.host_blocks(seq) * kBlock;
  std::vector<float> rows;
  for (int32_t pos = 0; pos < n; ++pos) {
    const bool host = pos < host_end;
    const int64_t slot =
        host ? int64_t{kv.host_block_table(seq)[static_cast<size_t>(pos / kBlock)]} * kBlock + pos % kBlock
             : kv.slot(seq, pos);
    const float* k = (host ? kv.host_tier()->k(layer) : kv.tensors().k(layer)) + slot * stride;
    const float* v = (host ? kv.host_tier()->v(layer) : kv.tensors().v(layer)) + slot * stride;
    rows.insert(rows.end(), k, k + stride);
    rows.insert(rows.end(), v, v + stride);
  }
  return rows;
}

/// A store of `pool_blocks` with a host tier; `prompt`'s first host_tokens booked there,
/// the rest reserved, prefilled layer by layer, the rest committed.
SeqId prefill_layerwise(Transformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t host_tokens,
                        std::shared_ptr<CopyStream> copies, Logits& logits) {
  const SeqId seq = kv.add_sequence({});
  kv.book_host_prefix(seq, std::span(prompt).first(static_cast<size_t>(host_tokens)));
  kv.reserve(seq, static_cast<int32_t>(prompt.size()));
  LayerPrefillWriter writer(kv, seq, std::move(copies));
  m.prefill_layerwise(seq, prompt, kv, writer, logits);
  writer.finish();
  kv.commit(seq, std::span(prompt).subspan(static_cast<size_t>(host_tokens)));
  return seq;
}

std::unique_ptr<HostKvTier> tier_for(const KvStore& kv, int32_t blocks) {
  const KvStoreConfig& c = kv.config();
  const HostTierLayout layout{c.num_layers, c.num_kv_heads, c.head_dim, c.block_size};
  return std::make_unique<HostKvTier>(layout, blocks * HostKvTier::block_bytes(layout));
}

TEST(LayerPrefill, LogitsAndKvAreTheChunkedPrefillsBits) {
  Transformer& m = test::model("demo-target");
  const auto long_prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> prompt(long_prompt.begin(), long_prompt.begin() + 203);
  const auto n = static_cast<int32_t>(prompt.size());
  const int32_t layers = m.config().num_layers;

  Logits want;
  KvStore pooled(m.kv_config(32, kBlock));
  const SeqId ref = pooled.add_sequence({});
  prefill(m, pooled, ref, prompt, 64, want);
  std::vector<std::vector<float>> want_kv;
  for (int32_t l = 0; l < layers; ++l) want_kv.push_back(layer_rows(pooled, ref, l, n));

  // 192: every full block on the host; the copies in line once.
  for (const auto& [overlap, host_tokens] : {std::pair{true, 0}, std::pair{true, 96}, std::pair{true, 192},
                                             std::pair{false, 96}}) {
    KvStore kv(m.kv_config(13, kBlock));  // 208 tokens: room for the prompt at most
    kv.attach_host_tier(tier_for(kv, 16));
    std::shared_ptr<CopyStream> copies;
    if (overlap) copies = std::make_shared<ThreadCopyStream>();
    else copies = std::make_shared<InlineCopyStream>();
    Logits got;
    const SeqId seq = prefill_layerwise(m, kv, prompt, host_tokens, copies, got);
    kv.check_invariants();
    EXPECT_EQ(kv.host_blocks(seq) * kBlock, host_tokens);
    ASSERT_EQ(got.row(0, 0).size(), want.row(0, 0).size());
    EXPECT_EQ(0, std::memcmp(got.row(0, 0).data(), want.row(0, 0).data(), got.row(0, 0).size() * sizeof(float)))
        << "overlap " << overlap << ", " << host_tokens << " tokens on the host";
    for (int32_t l = 0; l < layers; ++l)
      EXPECT_TRUE(layer_rows(kv, seq, l, n) == want_kv[static_cast<size_t>(l)])
          << "layer " << l << ", overlap " << overlap << ", " << host_tokens << " tokens on the host";
    kv.release(seq);
    kv.check_invariants();
  }
}

// Public golden prompts layer by layer into a 4-block pool (every full block but the last
// on the host tier), then plain greedy decoding through the ring: the golden tokens.
/// The model with ForwardModel's layer-wise prefill (unsupported): everything else its.
class NoLayerwisePrefill final : public ForwardModel {
 public:
  explicit NoLayerwisePrefill(Transformer& m) : m_(m) {}
  const ModelConfig& config() const override { return m_.config(); }
  Device device() const override { return m_.device(); }
  KvStoreConfig kv_config(int32_t num_blocks, int32_t block_size) const override {
    return m_.kv_config(num_blocks, block_size);
  }
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink, Logits& out) override {
    m_.forward(windows, kv, sink, out);
  }

 private:
  Transformer& m_;
};

// pipeline/prefill.h's prefill with a host tier (issue 16 item 5): a prompt longer than
// the pool's free blocks books its first blocks on the host tier and runs layer by layer;
// a model that refuses the layer-wise prefill gets the booking back and the chunks
// (fallback). Either way the logits and every layer's K/V are the all-in-pool bits.
TEST(LayerPrefill, ThePipelinesPrefillTakesItOrFallsBackToChunks) {
  Transformer& m = test::model("demo-target");
  m.enable_layer_ring(2);  // the fallback's chunks stream the host part
  const auto long_prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> prompt(long_prompt.begin(), long_prompt.begin() + 203);
  const auto n = static_cast<int32_t>(prompt.size());
  Logits want;
  KvStore pooled(m.kv_config(32, kBlock));
  const SeqId ref = pooled.add_sequence({});
  EXPECT_EQ(prefill(m, pooled, ref, prompt, 64, want), PrefillWay::chunked);
  NoLayerwisePrefill refusing(m);
  for (const bool refuse : {false, true}) {
    KvStore kv(m.kv_config(8, kBlock));  // 128 tokens: 5 blocks of the 13 go to the host up front
    kv.attach_host_tier(tier_for(kv, 16));
    EXPECT_EQ(layerwise_host_tokens(kv, n), 80);
    EXPECT_EQ(layerwise_host_tokens(kv, 128), 0);  // the pool holds it
    const SeqId seq = kv.add_sequence({});
    Logits got;
    ForwardModel& model = refuse ? static_cast<ForwardModel&>(refusing) : m;
    EXPECT_EQ(prefill(model, kv, seq, prompt, 64, got), refuse ? PrefillWay::fallback : PrefillWay::layerwise);
    kv.check_invariants();
    EXPECT_EQ(kv.length(seq), n);
    if (!refuse) {
      EXPECT_EQ(kv.host_blocks(seq), 5);
    }
    EXPECT_EQ(0, std::memcmp(got.row(0, 0).data(), want.row(0, 0).data(), got.row(0, 0).size() * sizeof(float)))
        << "refused " << refuse;
    for (int32_t l = 0; l < m.config().num_layers; ++l)
      EXPECT_EQ(layer_rows(kv, seq, l, n), layer_rows(pooled, ref, l, n)) << "layer " << l << " refused " << refuse;
  }
}

// A prompt longer than the pool meeting a pool full of another sequence: layerwise_room
// asks the offload policy for its last block (make_pool_room moves the other's oldest
// block to the host), then every whole block before it is booked on the host and the
// prompt runs layer by layer: the all-in-pool logits and K/V, the other's K/V unchanged
// by the move. No room is asked for while a block is free, for a prompt the pool could
// hold whole (chunk by chunk), or when the tier lacks the blocks for it and the move.
TEST(LayerPrefill, AFullPoolMakesRoomForItsLastBlock) {
  Transformer& m = test::model("demo-target");
  m.enable_layer_ring(2);
  const auto long_prompt = test::ids(test::golden_long()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> prompt(long_prompt.begin(), long_prompt.begin() + 203);
  const auto other_prompt = test::ids(test::golden_public()["cases"][0]["prompt_ids"]);
  const std::vector<int32_t> other(other_prompt.begin(), other_prompt.begin() + 128);
  const auto n = static_cast<int32_t>(prompt.size());
  Logits want, logits;
  KvStore pooled(m.kv_config(32, kBlock));
  const SeqId ref = pooled.add_sequence({});
  prefill(m, pooled, ref, prompt, 64, want);

  KvStore kv(m.kv_config(8, kBlock));  // 128 tokens
  kv.attach_host_tier(tier_for(kv, 24));
  const SeqId full = kv.add_sequence({});
  EXPECT_EQ(layerwise_room(kv, n), 0);  // 8 free blocks: it books now
  EXPECT_EQ(prefill(m, kv, full, other, 64, logits), PrefillWay::chunked);  // fills the pool
  ASSERT_EQ(kv.free_blocks(), 0);
  std::vector<std::vector<float>> other_kv;
  for (int32_t l = 0; l < m.config().num_layers; ++l) other_kv.push_back(layer_rows(kv, full, l, 128));
  EXPECT_EQ(layerwise_host_tokens(kv, n), 0);
  EXPECT_EQ(layerwise_room(kv, n), 1);
  EXPECT_EQ(layerwise_room(kv, 128), 0);  // the pool could hold it whole
  KvStore small(m.kv_config(8, kBlock));
  small.attach_host_tier(tier_for(small, 12));  // 12 blocks to book, none for the move
  EXPECT_EQ(prefill(m, small, small.add_sequence({}), other, 64, logits), PrefillWay::chunked);
  EXPECT_EQ(layerwise_room(small, n), 0);

  const SeqId seq = kv.add_sequence({});
  Logits got;
  EXPECT_EQ(prefill(m, kv, seq, prompt, 64, got), PrefillWay::layerwise);
  kv.check_invariants();
  EXPECT_EQ(kv.host_blocks(full), 1);
  EXPECT_EQ(kv.host_blocks(seq), 12);  // 192 of 203 tokens; the last 11 in the freed block
  EXPECT_EQ(kv.offload_stats().blocks_to_host, 13);
  EXPECT_EQ(0, std::memcmp(got.row(0, 0).data(), want.row(0, 0).data(), got.row(0, 0).size() * sizeof(float)));
  for (int32_t l = 0; l < m.config().num_layers; ++l) {
    EXPECT_EQ(layer_rows(kv, seq, l, n), layer_rows(pooled, ref, l, n)) << "layer " << l;
    EXPECT_EQ(layer_rows(kv, full, l, 128), other_kv[static_cast<size_t>(l)]) << "layer " << l;
  }
}

TEST(LayerPrefill, DecodingAfterItGivesTheGoldenContinuation) {
  Transformer& m = test::model("demo-target");
  m.enable_layer_ring(2);
  for (size_t i : {0u, 3u, 10u}) {  // 217, 173 and 185 tokens
    const auto& c = test::golden_public()["cases"][i];
    const auto prompt = test::ids(c["prompt_ids"]);
    const auto golden = test::ids(c["target_greedy_96"]);
    const std::vector<int32_t> want(golden.begin(), golden.begin() + 12);
    KvStore kv(m.kv_config(4, kBlock));
    kv.attach_host_tier(tier_for(kv, static_cast<int32_t>(prompt.size()) / kBlock + 1));
    const int32_t host_tokens = (static_cast<int32_t>(prompt.size()) - 1) / kBlock * kBlock - kBlock;
    Logits logits;
    const SeqId seq = prefill_layerwise(m, kv, prompt, host_tokens, std::make_shared<ThreadCopyStream>(), logits);
    std::vector<int32_t> got{cpu::argmax(logits.row(0, 0))};
    DirectKvWriter writer(kv);
    while (got.size() < want.size()) {
      const int32_t token = got.back();
      kv.reserve(seq, kv.length(seq) + 1);
      const ForwardWindow w{seq, std::span(&token, 1), LogitsMode::last};
      m.forward({&w, 1}, kv, writer, logits);
      kv.commit(seq, std::span(&token, 1));
      got.push_back(cpu::argmax(logits.row(0, 0)));
    }
    EXPECT_EQ(got, want) << "case " << i;
    kv.release(seq);
    kv.check_invariants();
  }
}

}  // namespace
}  // namespace specpipe
