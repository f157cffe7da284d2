// The NWOR plugin (plugins/nwor/README.md) through its C table, loaded from the real
// shared library: what reaches the pool, the counters, the fallbacks.
#include <algorithm>
#include <set>
#include <utility>

#include "nwor_test_host.h"

namespace nwor_test {
namespace {

using NworPluginTest = NworFixture;

TEST_F(NworPluginTest, TableDescribesAKvWritePlugin) {
  EXPECT_STREQ(table().name, "nwor");
  EXPECT_TRUE(library_->fills("kv_write"));
  EXPECT_FALSE(library_->fills("verify_plan"));
  EXPECT_EQ(table().verify_plan, nullptr);
  ASSERT_NE(table().describe_metrics, nullptr);
}

// Seeded random rounds: several windows of random sizes, random accepted prefixes,
// verdicts in random order. After each commit the pool holds exactly the staged rows of
// every accepted token in every layer, and no rejected token's slot was ever written.
TEST_F(NworPluginTest, RandomRoundsWriteExactlyTheAcceptedRowsOfEveryLayer) {
  create();
  std::mt19937 rng(20261122);
  int64_t staged = 0, committed = 0, rejected = 0;
  const int kRounds = 200;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<int32_t> sizes(1 + rng() % kMaxBatch);
    for (int32_t& n : sizes) n = 1 + static_cast<int32_t>(rng() % (kMaxGamma + 1));
    Round r = Round::make(sizes, rng);
    std::vector<int32_t> accepted;
    for (int32_t n : sizes) accepted.push_back(1 + static_cast<int32_t>(rng() % n));
    const auto k_before = host_.k_pool;
    const auto v_before = host_.v_pool;
    host_.writes.clear();

    ASSERT_EQ(begin(r), SPECPIPE_OK) << error_;
    stage_all(r);
    auto v = verdicts(r, accepted);
    std::shuffle(v.begin(), v.end(), rng);
    ASSERT_EQ(commit(v), SPECPIPE_OK) << error_;

    expect_committed(r, accepted);
    std::set<std::pair<int32_t, int64_t>> expected, written;
    for (size_t w = 0; w < sizes.size(); ++w)
      for (int32_t l = 0; l < kLayers; ++l)
        for (int32_t t = 0; t < accepted[w]; ++t) expected.insert({l, r.slots[w][t]});
    for (const TestHost::Write& w : host_.writes)
      for (int64_t slot : w.slots) EXPECT_TRUE(written.insert({w.layer, slot}).second) << "slot written twice";
    EXPECT_EQ(written, expected) << "round " << round;
    for (size_t w = 0; w < sizes.size(); ++w)
      for (int32_t t = accepted[w]; t < sizes[w]; ++t)
        for (int32_t l = 0; l < kLayers; ++l) {
          const int64_t slot = r.slots[w][t];
          EXPECT_EQ(written.count({l, slot}), 0u) << "rejected token written";
          EXPECT_TRUE(same_bits(host_.k_row(l, slot), k_before[l].data() + slot * kKvDim));
          EXPECT_TRUE(same_bits(host_.v_row(l, slot), v_before[l].data() + slot * kKvDim));
        }
    staged += r.total_rows;
    for (size_t w = 0; w < sizes.size(); ++w) {
      committed += accepted[w];
      rejected += sizes[w] - accepted[w];
    }
    if (::testing::Test::HasFailure()) break;
  }
  const nlohmann::json m = metrics();
  EXPECT_EQ(m["rounds_staged"], kRounds);
  EXPECT_EQ(m["rounds_committed"], kRounds);
  EXPECT_EQ(m["rounds_declined"], 0);
  EXPECT_EQ(m["stage_operations"], staged * kLayers);
  EXPECT_EQ(m["unique_staged_tokens"], staged);
  EXPECT_EQ(m["committed_tokens"], committed);
  EXPECT_EQ(m["rejected_tokens"], rejected);
  EXPECT_GT(rejected, 0);
  EXPECT_EQ(m["pool_bytes_written"], committed * kLayers * kRowBytesKv);
  EXPECT_EQ(m["pool_bytes_not_written"], rejected * kLayers * kRowBytesKv);
  for (const auto& [reason, count] : m["fallbacks"].items()) EXPECT_EQ(count, 0) << reason;
}

// Rows go to the index fixed at begin(), not "the next position": staging the layers in
// another order changes nothing, and all layers use the one slot vector.
TEST_F(NworPluginTest, LayerOrderDoesNotMoveRows) {
  create();
  std::mt19937 rng(3);
  Round r = Round::make({3, 5, 2}, rng);
  ASSERT_EQ(begin(r), SPECPIPE_OK) << error_;
  for (int32_t l = kLayers - 1; l >= 0; --l) ASSERT_EQ(stage(r, l), SPECPIPE_OK) << error_;
  ASSERT_EQ(commit(verdicts(r, {2, 5, 1})), SPECPIPE_OK) << error_;
  expect_committed(r, {2, 5, 1});
  // One call per (window, layer), window by window, with the same slots in every layer.
  ASSERT_EQ(host_.writes.size(), 3u * kLayers);
  for (size_t w = 0; w < 3; ++w)
    for (int32_t l = 0; l < kLayers; ++l) {
      const TestHost::Write& write = host_.writes[w * kLayers + l];
      EXPECT_EQ(write.layer, l);
      EXPECT_EQ(write.slots, std::vector<int64_t>(r.slots[w].begin(), r.slots[w].begin() + (w == 0 ? 2 : w == 1 ? 5 : 1)));
    }
}

TEST_F(NworPluginTest, UniqueTokensAreCountedOncePerTokenAndOperationsPerLayer) {
  create();
  std::mt19937 rng(5);
  Round a = Round::make({3, 2}, rng);
  ASSERT_EQ(begin(a), SPECPIPE_OK);
  ASSERT_EQ(stage(a, 0), SPECPIPE_OK);
  EXPECT_EQ(metrics()["stage_operations"], 5);
  EXPECT_EQ(metrics()["unique_staged_tokens"], 5);
  for (int32_t l = 1; l < kLayers; ++l) ASSERT_EQ(stage(a, l), SPECPIPE_OK);
  EXPECT_EQ(metrics()["stage_operations"], 5 * kLayers);
  EXPECT_EQ(metrics()["unique_staged_tokens"], 5);
  ASSERT_EQ(commit(verdicts(a, {3, 1})), SPECPIPE_OK) << error_;

  Round b = Round::make({4}, rng);
  ASSERT_EQ(begin(b), SPECPIPE_OK);
  stage_all(b);
  hooks().abort(instance_);
  const nlohmann::json m = metrics();
  EXPECT_EQ(m["stage_operations"], 9 * kLayers);
  EXPECT_EQ(m["unique_staged_tokens"], 9);
  EXPECT_EQ(m["committed_tokens"], 4);
  EXPECT_EQ(m["rejected_tokens"], 1);
  EXPECT_EQ(m["rounds_aborted"], 1);
}

// The guarantee on a failing write_slots call (README "Failure behaviour"): the plugin
// stops at that call and returns an error; windows before the failing one hold all their
// layers, the failing window exactly the layers before the failing one, later windows
// nothing; no counter says a token was committed; the buffer is free again.
TEST_F(NworPluginTest, CommitStopsAtTheFailingWriteAndReportsIt) {
  const std::vector<int32_t> sizes{2, 3, 1};
  const std::vector<int32_t> accepted{1, 3, 1};
  const int calls = static_cast<int>(sizes.size()) * kLayers;
  for (int fail_at = 1; fail_at <= calls; ++fail_at) {
    SCOPED_TRACE("write_slots fails at call " + std::to_string(fail_at));
    host_ = TestHost();
    host_api_ = host_.api();
    create();
    std::mt19937 rng(static_cast<unsigned>(fail_at));
    Round r = Round::make(sizes, rng);
    const auto k_before = host_.k_pool;
    host_.fail_write_at = fail_at;
    ASSERT_EQ(begin(r), SPECPIPE_OK);
    stage_all(r);
    EXPECT_EQ(commit(verdicts(r, accepted)), SPECPIPE_ERR_CAPACITY) << "the host's status comes back";
    const size_t failing_window = static_cast<size_t>((fail_at - 1) / kLayers);
    const int32_t failing_layer = (fail_at - 1) % kLayers;
    EXPECT_NE(std::string(error_).find("write_slots"), std::string::npos) << error_;
    EXPECT_NE(std::string(error_).find("sequence " + std::to_string(r.sequences[failing_window])), std::string::npos)
        << error_;
    EXPECT_NE(std::string(error_).find("layer " + std::to_string(failing_layer)), std::string::npos) << error_;
    EXPECT_EQ(host_.write_calls, fail_at) << "no write after the failing one";
    ASSERT_EQ(host_.writes.size(), static_cast<size_t>(fail_at - 1));
    int64_t bytes = 0;
    for (size_t w = 0; w < sizes.size(); ++w)
      for (int32_t l = 0; l < kLayers; ++l) {
        const bool written = w < failing_window || (w == failing_window && l < failing_layer);
        for (int32_t t = 0; t < sizes[w]; ++t) {
          const int64_t slot = r.slots[w][t];
          const bool holds_row = written && t < accepted[w];
          const float* expect = holds_row ? r.k_row(l, r.first_row(w) + t) : k_before[l].data() + slot * kKvDim;
          EXPECT_TRUE(same_bits(host_.k_row(l, slot), expect)) << "window " << w << " layer " << l << " token " << t;
        }
        if (written) bytes += accepted[w] * kRowBytesKv;
      }
    nlohmann::json m = metrics();
    EXPECT_EQ(m["committed_tokens"], 0);
    EXPECT_EQ(m["rounds_committed"], 0);
    EXPECT_EQ(m["pool_bytes_written"], bytes);
    EXPECT_EQ(m["fallbacks"]["commit_failed"], 1);
    // The failed commit released the buffer: the next round stages and commits.
    host_.fail_write_at = 0;
    Round next = Round::make({2}, rng);
    ASSERT_EQ(begin(next), SPECPIPE_OK) << error_;
    stage_all(next);
    ASSERT_EQ(commit(verdicts(next, {2})), SPECPIPE_OK) << error_;
    expect_committed(next, {2});
    table().destroy(instance_);
    instance_ = nullptr;
    EXPECT_EQ(host_.live_allocations, 0);
  }
}

TEST_F(NworPluginTest, AHostThatDeclinesAWriteFailsTheCommit) {
  create();
  std::mt19937 rng(11);
  Round r = Round::make({2}, rng);
  host_.fail_write_at = 2;
  host_.fail_write_status = SPECPIPE_DECLINED;  // a write cannot be "declined": an error
  ASSERT_EQ(begin(r), SPECPIPE_OK);
  stage_all(r);
  EXPECT_EQ(commit(verdicts(r, {2})), SPECPIPE_ERR_INTERNAL);
  EXPECT_EQ(host_.write_calls, 2);
}

TEST_F(NworPluginTest, DeclinesWindowsLargerThanTheBuffer) {
  create();  // default max_rows = (max_gamma + 2) * max_batch = 18
  std::mt19937 rng(13);
  Round fits = Round::make({6, 6, 6}, rng);  // a full batch of the longest windows
  ASSERT_EQ(begin(fits), SPECPIPE_OK) << error_;
  hooks().abort(instance_);
  Round too_large = Round::make({6, 6, 6, 1}, rng);
  EXPECT_EQ(begin(too_large), SPECPIPE_DECLINED);
  EXPECT_NE(std::string(error_).find("window_too_large"), std::string::npos) << error_;
  EXPECT_EQ(stage(too_large, 0), SPECPIPE_ERR_INVALID_ARGUMENT) << "a declined round stages nothing";

  create(R"({"max_rows": 4})");
  Round four = Round::make({4}, rng);
  Round five = Round::make({5}, rng);
  EXPECT_EQ(begin(five), SPECPIPE_DECLINED);
  ASSERT_EQ(begin(four), SPECPIPE_OK) << error_;
  stage_all(four);
  ASSERT_EQ(commit(verdicts(four, {4})), SPECPIPE_OK) << error_;
  const nlohmann::json m = metrics();
  EXPECT_EQ(m["fallbacks"]["window_too_large"], 1);
  EXPECT_EQ(m["rounds_declined"], 1);
  EXPECT_EQ(m["max_rows"], 4);
}

TEST_F(NworPluginTest, DeclinesASecondRoundWhileOneIsStaged) {
  create();
  std::mt19937 rng(17);
  Round first = Round::make({2, 3}, rng);
  Round second = Round::make({1}, rng);
  ASSERT_EQ(begin(first), SPECPIPE_OK);
  ASSERT_EQ(stage(first, 0), SPECPIPE_OK);
  EXPECT_EQ(begin(second), SPECPIPE_DECLINED);
  EXPECT_NE(std::string(error_).find("buffer_busy"), std::string::npos) << error_;
  // The decline changed nothing: the first round goes on and commits.
  for (int32_t l = 1; l < kLayers; ++l) ASSERT_EQ(stage(first, l), SPECPIPE_OK) << error_;
  ASSERT_EQ(commit(verdicts(first, {2, 2})), SPECPIPE_OK) << error_;
  expect_committed(first, {2, 2});
  EXPECT_EQ(begin(second), SPECPIPE_OK) << error_;
  const nlohmann::json m = metrics();
  EXPECT_EQ(m["fallbacks"]["buffer_busy"], 1);
  EXPECT_EQ(m["rounds_declined"], 1);
  EXPECT_EQ(m["rounds_staged"], 2);
}

TEST_F(NworPluginTest, DisabledByConfigDeclinesEveryRoundAndAllocatesNothing) {
  create(R"({"enabled": false})");
  EXPECT_EQ(host_.allocations, 0);
  std::mt19937 rng(19);
  Round r = Round::make({1}, rng);
  EXPECT_EQ(begin(r), SPECPIPE_DECLINED);
  EXPECT_NE(std::string(error_).find("disabled"), std::string::npos) << error_;
  EXPECT_EQ(begin(r), SPECPIPE_DECLINED);
  const nlohmann::json m = metrics();
  EXPECT_EQ(m["enabled"], false);
  EXPECT_EQ(m["fallbacks"]["disabled"], 2);
  EXPECT_EQ(m["rounds_declined"], 2);
  EXPECT_EQ(m["rounds_staged"], 0);
}

TEST_F(NworPluginTest, AbortDropsTheRoundAndWritesNothing) {
  create();
  std::mt19937 rng(23);
  Round r = Round::make({3, 1}, rng);
  ASSERT_EQ(begin(r), SPECPIPE_OK);
  ASSERT_EQ(stage(r, 0), SPECPIPE_OK);
  ASSERT_EQ(stage(r, 1), SPECPIPE_OK);
  hooks().abort(instance_);
  EXPECT_EQ(host_.write_calls, 0);
  EXPECT_EQ(commit(verdicts(r, {1, 1})), SPECPIPE_ERR_INVALID_ARGUMENT) << "nothing left to commit";
  hooks().abort(instance_);  // idle: nothing to drop
  hooks().abort(nullptr);
  EXPECT_EQ(host_.write_calls, 0);
  Round next = Round::make({2}, rng);
  ASSERT_EQ(begin(next), SPECPIPE_OK) << error_;
  stage_all(next);
  ASSERT_EQ(commit(verdicts(next, {1})), SPECPIPE_OK) << error_;
  expect_committed(next, {1});
  EXPECT_EQ(metrics()["rounds_aborted"], 1);
}

TEST_F(NworPluginTest, AFailedHostCopyDropsTheRound) {
  create();
  std::mt19937 rng(29);
  Round r = Round::make({2}, rng);
  ASSERT_EQ(begin(r), SPECPIPE_OK);
  ASSERT_EQ(stage(r, 0), SPECPIPE_OK);
  host_.fail_copy_at = host_.copy_calls + 1;
  EXPECT_EQ(stage(r, 1), SPECPIPE_ERR_INTERNAL);
  EXPECT_NE(std::string(error_).find("copy"), std::string::npos) << error_;
  EXPECT_EQ(stage(r, 2), SPECPIPE_ERR_INVALID_ARGUMENT) << "the round is gone";
  EXPECT_EQ(metrics()["fallbacks"]["stage_failed"], 1);
  ASSERT_EQ(begin(r), SPECPIPE_OK) << "not busy after a failed stage";
  stage_all(r);
  ASSERT_EQ(commit(verdicts(r, {2})), SPECPIPE_OK) << error_;
  expect_committed(r, {2});
}

TEST_F(NworPluginTest, MetricsAreOneJsonObjectWithEveryCounter) {
  create();
  const nlohmann::json m = metrics();
  for (const char* key : {"rounds_staged", "rounds_declined", "rounds_committed", "rounds_aborted", "stage_operations",
                          "unique_staged_tokens", "committed_tokens", "rejected_tokens", "write_slots_calls",
                          "pool_bytes_written", "pool_bytes_not_written"}) {
    ASSERT_TRUE(m.contains(key)) << key;
    EXPECT_TRUE(m[key].is_number_integer()) << key;
  }
  ASSERT_TRUE(m["fallbacks"].is_object());
  for (const char* reason : {"window_too_large", "buffer_busy", "disabled", "commit_failed", "stage_failed"})
    EXPECT_EQ(m["fallbacks"][reason], 0) << reason;
  EXPECT_EQ(m["max_rows"], kDefaultRows);

  // Truncation, snprintf's convention: the return value is the JSON's length without
  // the NUL (>= size: truncated), the buffer always NUL-terminated.
  const size_t length = table().describe_metrics(instance_, nullptr, 0);
  char small[10];
  EXPECT_EQ(table().describe_metrics(instance_, small, sizeof small), length);
  EXPECT_GE(length, sizeof small);
  EXPECT_EQ(std::strlen(small), sizeof small - 1);
  std::string exact(length, 'x');  // room for all but the NUL: truncated by one
  EXPECT_EQ(table().describe_metrics(instance_, exact.data(), exact.size()), length);
  EXPECT_EQ(std::strlen(exact.c_str()), length - 1);
}

}  // namespace
}  // namespace nwor_test
