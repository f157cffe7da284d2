// The pipeline on two actor threads (scheduler.actor_threads: 2), so the verifier's
// forward and the kv-router's handlers really run at the same time, while a client asks
// for statistics, KV occupancy and strategy metrics in a tight loop (as the endpoint's
// `stats` request does). The kv-router lends the kv_write sink to the verifier with each
// forward and answers a metrics query only once the sink is back
// (actors/kv_router_actor.cpp): every snapshot covers whole forwards, so the pool rows
// written are a multiple of the layer count, and counters never go backwards. Outputs
// stay the solo greedy ones. Run under ThreadSanitizer by `scripts/test.sh --tsan`, where
// a read of the sink or the plugin mid-forward is reported as a data race.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "tests/support/engine.h"
#include "tests/support/golden.h"
#include "tests/support/sanitizer.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

struct Outcome {
  std::map<size_t, std::vector<int32_t>> tokens;  ///< by request index
  int64_t snapshots = 0;
};

/// Runs `n` greedy golden requests concurrently on `config` with two actor threads and
/// queries every kind of statistic until they are done; checks each metrics snapshot.
Outcome run_while_querying(PipelineConfig config, size_t n, const std::string& strategy) {
  config.scheduler.actor_threads = 2;
  actors::Engine engine(config);
  const int64_t layers = engine.parts().target->config().num_layers;
  const auto& cases = test::golden_public()["cases"];
  std::atomic<size_t> finished{0};
  std::mutex mutex;
  Outcome out;
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < n; ++i) {
    auto sink = std::make_shared<actors::CallbackSink>(nullptr, [&](const actors::Completion& c) {
      {
        std::lock_guard lock(mutex);
        EXPECT_EQ(c.reason, FinishReason::length) << c.error;
        out.tokens[index.at(c.id)] = c.tokens;
      }
      ++finished;
    });
    std::lock_guard lock(mutex);  // the completion may come before index is filled
    index[engine.submit(test::greedy_request(test::ids(cases[i]["prompt_ids"]), 24 + 4 * static_cast<int32_t>(i)),
                        sink)] = i;
  }
  int64_t last_rounds = 0, last_rows = 0, torn = 0;
  std::string first_torn;
  while (finished.load() < n) {
    const nlohmann::json m = engine.strategy_metrics();
    const nlohmann::json& kv = m["kv_write"];
    EXPECT_EQ(kv["strategy"], strategy);
    const auto rows = kv["pool_rows_written"].get<int64_t>();
    const auto rounds = kv["rounds"].get<int64_t>();
    // Each forward writes every layer's rows of its tokens: a snapshot taken between
    // forwards holds whole layers' worth, one taken during a forward usually does not.
    if (rows % layers != 0 || kv["prefill_rows_written"].get<int64_t>() % layers != 0) {
      if (torn++ == 0) first_torn = kv.dump();
    }
    EXPECT_GE(rows, last_rows);
    EXPECT_GE(rounds, last_rounds);
    last_rows = rows;
    last_rounds = rounds;
    engine.stats();
    engine.kv_occupancy();
    engine.draft_kv_occupancy();
    ++out.snapshots;
  }
  EXPECT_EQ(torn, 0) << "of " << out.snapshots << " metrics snapshots, " << torn
                     << " were taken mid-forward (rows not a multiple of " << layers << " layers), the first: "
                     << first_torn;
  return out;
}

void expect_golden(const Outcome& out, size_t n) {
  const auto& cases = test::golden_public()["cases"];
  ASSERT_EQ(out.tokens.size(), n);
  for (const auto& [i, tokens] : out.tokens) {
    std::vector<int32_t> want = test::ids(cases[i]["target_greedy_96"]);
    want.resize(tokens.size());
    EXPECT_EQ(tokens, want) << "request " << i;
  }
  EXPECT_GT(out.snapshots, 0);
}

TEST(ActorThreads, MetricsDuringRoundsSeeWholeForwardsDirectWriter) {
  const size_t n = test::under_sanitizer() ? 4 : 8;
  const Outcome out = run_while_querying(test::demo_engine_config(), n, "direct");
  expect_golden(out, n);
}

// The same with the NWOR plugin in the kv_write slot: the metrics query also calls the
// plugin's describe-metrics hook, which must not run beside its stage hook.
TEST(ActorThreads, MetricsDuringRoundsSeeWholeForwardsNworPlugin) {
  PipelineConfig config = test::demo_engine_config();
  config.plugins.push_back({"nwor", test::plugin_library(NWOR_PLUGIN_PATH), "{}"});
  config.slots.kv_write = "nwor";
  const size_t n = test::under_sanitizer() ? 4 : 8;
  const Outcome out = run_while_querying(config, n, "nwor");
  expect_golden(out, n);
}

}  // namespace
}  // namespace specpipe
