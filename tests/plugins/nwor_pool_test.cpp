// NWOR in the real forward pass: two KV stores run the same rounds of the demo target,
// one through the direct path, one through the NWOR plugin (loaded from its .so). After
// every round the committed slots of both pools are byte-identical, and the slots of
// rejected tokens in the NWOR pool are exactly as they were before the round (the direct
// pool's are not: the check can see a write). The host's write counter equals
// accepted x layers.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "pipeline/plugin_kv_writer.h"
#include "pipeline/plugin_library.h"
#include "tests/support/models.h"
#include "tests/support/property_prompts.h"

namespace specpipe {
namespace {

constexpr int32_t kMaxGamma = 8;
constexpr int32_t kPoolTokens = 1024;

/// One KV store and the sink that fills it. Every pool byte starts as 0xFF (a NaN
/// pattern no forward produces), so a row nobody wrote is recognisable.
struct Lane {
  Lane(Transformer& target, int32_t block_size, bool nwor) : kv(target.kv_config(kPoolTokens / block_size, block_size)) {
    KvTensors& t = kv.tensors();
    const size_t floats = static_cast<size_t>(t.num_blocks()) * static_cast<size_t>(t.block_size()) *
                          static_cast<size_t>(t.slot_stride());
    for (int32_t layer = 0; layer < t.num_layers(); ++layer) {
      std::memset(t.k(layer), 0xFF, floats * sizeof(float));
      std::memset(t.v(layer), 0xFF, floats * sizeof(float));
    }
    if (!nwor) {
      sink = std::make_unique<DirectKvWriter>(kv);
      return;
    }
    plugin = std::make_shared<PluginInstance>(PluginLibrary::load(NWOR_PLUGIN_PATH), "kv_write",
                                              describe_model(kv, kMaxGamma, 8), nlohmann::json::object(), &kv);
    sink = std::make_unique<PluginKvWriter>(kv, plugin);
  }

  /// The K and V rows of `slot` in every layer, as bytes.
  std::vector<char> rows(int64_t slot) const {
    const KvTensors& t = kv.tensors();
    const size_t bytes = static_cast<size_t>(t.slot_stride()) * sizeof(float);
    std::vector<char> out;
    for (int32_t layer = 0; layer < t.num_layers(); ++layer)
      for (const float* base : {t.k(layer), t.v(layer)}) {
        const char* at = reinterpret_cast<const char*>(base + slot * t.slot_stride());
        out.insert(out.end(), at, at + bytes);
      }
    return out;
  }

  KvStore kv;
  std::shared_ptr<PluginInstance> plugin;
  std::unique_ptr<KvWriteSink> sink;
  std::vector<SeqId> seqs;
};

void prefill(Transformer& target, Lane& lane, const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<ForwardWindow> windows;
  for (const auto& p : prompts) {
    const SeqId seq = lane.kv.add_sequence({});
    lane.kv.reserve(seq, static_cast<int32_t>(p.size()));
    lane.seqs.push_back(seq);
    windows.push_back({seq, p, LogitsMode::none});
  }
  Logits logits;
  target.forward(windows, lane.kv, *lane.sink, logits);
  for (size_t i = 0; i < prompts.size(); ++i) lane.kv.commit(lane.seqs[i], prompts[i]);
}

class NworPool : public ::testing::TestWithParam<int32_t> {};

TEST_P(NworPool, CommittedSlotsMatchTheDirectPathAndRejectedSlotsAreNeverWritten) {
  const int32_t block_size = GetParam();
  Transformer& target = test::model("demo-target");
  const int32_t layers = target.config().num_layers;
  Lane direct(target, block_size, false), nwor(target, block_size, true);
  std::vector<std::vector<int32_t>> prompts(test::property_prompts().begin(), test::property_prompts().begin() + 4);
  prefill(target, direct, prompts);
  prefill(target, nwor, prompts);

  std::mt19937 rng(7);
  int64_t accepted_rows = 0, rejected_rows = 0, direct_rejected_rows_changed = 0;
  for (int round = 0; round < 24; ++round) {
    // The same windows and verdicts for both lanes: random tokens, random accepted prefixes.
    std::vector<std::vector<int32_t>> tokens(prompts.size());
    std::vector<int32_t> keep(prompts.size());
    for (size_t s = 0; s < prompts.size(); ++s) {
      const int32_t n = 1 + static_cast<int32_t>(rng() % (kMaxGamma + 1));
      for (int32_t i = 0; i < n; ++i) tokens[s].push_back(1 + static_cast<int32_t>(rng() % 8000));
      keep[s] = 1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(n));
    }
    std::vector<std::vector<char>> nwor_rejected_before;
    for (Lane* lane : {&direct, &nwor}) {
      std::vector<ForwardWindow> windows;
      std::vector<WindowPlacement> placements;
      std::vector<WindowCommit> verdicts;
      for (size_t s = 0; s < prompts.size(); ++s) {
        const SeqId seq = lane->seqs[s];
        const int32_t start = lane->kv.length(seq), n = static_cast<int32_t>(tokens[s].size());
        lane->kv.reserve(seq, start + n);
        windows.push_back({seq, tokens[s], LogitsMode::all});
        placements.push_back({seq, start, n});
        verdicts.push_back({seq, keep[s]});
      }
      std::vector<std::vector<char>> rejected_before;
      for (size_t s = 0; s < prompts.size(); ++s)
        for (int32_t i = keep[s]; i < static_cast<int32_t>(tokens[s].size()); ++i)
          rejected_before.push_back(lane->rows(lane->kv.slot(lane->seqs[s], lane->kv.length(lane->seqs[s]) + i)));

      lane->sink->begin_round(placements);
      Logits logits;
      target.forward(windows, lane->kv, *lane->sink, logits);
      ASSERT_TRUE(lane->sink->commit_round(verdicts)) << "round " << round;

      size_t r = 0;
      for (size_t s = 0; s < prompts.size(); ++s) {
        const SeqId seq = lane->seqs[s];
        const int32_t start = lane->kv.length(seq);
        for (int32_t i = keep[s]; i < static_cast<int32_t>(tokens[s].size()); ++i, ++r) {
          const bool unchanged = lane->rows(lane->kv.slot(seq, start + i)) == rejected_before[r];
          if (lane == &nwor)
            EXPECT_TRUE(unchanged) << "NWOR wrote a rejected token: round " << round << ", sequence " << s;
          else
            direct_rejected_rows_changed += unchanged ? 0 : 1;
        }
        lane->kv.commit(seq, std::span<const int32_t>(tokens[s]).first(static_cast<size_t>(keep[s])));
        lane->kv.truncate(seq, lane->kv.length(seq));
      }
    }
    for (size_t s = 0; s < prompts.size(); ++s) {
      accepted_rows += int64_t{keep[s]} * layers;
      rejected_rows += (static_cast<int64_t>(tokens[s].size()) - keep[s]) * layers;
      const int32_t length = direct.kv.length(direct.seqs[s]);
      ASSERT_EQ(length, nwor.kv.length(nwor.seqs[s]));
      for (int32_t pos = 0; pos < length; ++pos)
        ASSERT_EQ(direct.rows(direct.kv.slot(direct.seqs[s], pos)), nwor.rows(nwor.kv.slot(nwor.seqs[s], pos)))
            << "round " << round << ", sequence " << s << ", position " << pos;
    }
  }
  EXPECT_GT(direct_rejected_rows_changed, 0) << "the direct path should have written rejected rows";
  const KvWriteStats stats = nwor.sink->stats();
  EXPECT_EQ(stats.rows_not_written, rejected_rows);
  EXPECT_EQ(stats.rows_wasted, 0);
  const nlohmann::json metrics = nwor.plugin->metrics();
  EXPECT_EQ(metrics["host"]["pool_rows_written"].get<int64_t>(), accepted_rows) << metrics.dump();
  EXPECT_TRUE(metrics["host"]["fallbacks"].empty()) << metrics.dump();
  EXPECT_EQ(direct.sink->stats().rows_wasted, rejected_rows);
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, NworPool, ::testing::Values(1, 16));

}  // namespace
}  // namespace specpipe
