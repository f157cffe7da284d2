// Batch invariance (ARCHITECTURE.md section 7): a token's logits are the same bits
// whether it is computed alone, inside a window, or beside other sequences.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cpu/thread_pool.h"
#include "pipeline/prefill.h"
#include "tests/support/golden.h"
#include "tests/support/models.h"

namespace specpipe {
namespace {

std::vector<float> copy(std::span<const float> s) { return {s.begin(), s.end()}; }

// A sequence with `tokens` committed (prefix-cache hits included), prefilled in `chunk`s.
SeqId start(Transformer& m, KvStore& kv, std::span<const int32_t> tokens, int32_t chunk, Logits& logits) {
  int32_t cached = 0;
  const SeqId seq = kv.add_sequence(tokens, &cached);
  prefill(m, kv, seq, tokens.subspan(static_cast<size_t>(cached)), chunk, logits);
  return seq;
}

class Invariance : public ::testing::TestWithParam<const char*> {};

TEST_P(Invariance, TokenLogitsIdenticalAloneInWindowAndInBatch) {
  Transformer& m = test::model(GetParam());
  const auto& cases = test::golden_public()["cases"];
  const auto prompt = test::ids(cases[1]["prompt_ids"]);
  const auto cont = test::ids(cases[1]["target_greedy_96"]);
  const auto other = test::ids(cases[2]["prompt_ids"]);
  KvStore kv(m.kv_config(128));
  DirectKvWriter writer(kv);
  Logits logits;

  // Reference: decode cont[0..5) one token at a time after the prompt.
  const SeqId a = start(m, kv, prompt, 16, logits);
  std::vector<std::vector<float>> alone;
  for (int i = 0; i < 5; ++i) {
    kv.reserve(a, kv.length(a) + 1);
    ForwardWindow w{a, {&cont[static_cast<size_t>(i)], 1}, LogitsMode::last};
    m.forward({&w, 1}, kv, writer, logits);
    kv.commit(a, {&cont[static_cast<size_t>(i)], 1});
    alone.push_back(copy(logits.row(0)));
  }

  // The same five tokens as one verify-style window, batched beside two other sequences
  // (one mid-prefill, one decoding), with a different thread count.
  cpu::set_num_threads(1);
  const SeqId b = start(m, kv, prompt, 7, logits);
  const SeqId c = start(m, kv, std::span(other).first(20), 20, logits);
  const SeqId d = start(m, kv, other, 64, logits);
  kv.reserve(b, kv.length(b) + 5);
  kv.reserve(c, kv.length(c) + 9);
  kv.reserve(d, kv.length(d) + 1);
  const ForwardWindow batch[] = {{c, std::span(other).subspan(20, 9), LogitsMode::all},
                                 {b, std::span(cont).first(5), LogitsMode::all},
                                 {d, std::span(cont).first(1), LogitsMode::last}};
  m.forward(batch, kv, writer, logits);
  cpu::set_num_threads(2);
  for (int i = 0; i < 5; ++i) {
    const auto row = logits.row(1, i);
    ASSERT_EQ(0, std::memcmp(row.data(), alone[static_cast<size_t>(i)].data(), row.size_bytes()))
        << "token " << i << " of the window differs from its solo decode";
  }
}

// A window wide enough that QK-norm + RoPE and silu split over the pool (>= 64 heads of
// q and k, >= 1,024 8-float vectors of the MLP's width: both on demo-target and
// demo-draft, the heads only on llama-tiny-random): the same bits on 2 threads as on 1.
TEST_P(Invariance, WideWindowSameBitsOnOneAndTwoThreads) {
  Transformer& m = test::model(GetParam());
  const auto& cases = test::golden_public()["cases"];
  const auto prompt = test::ids(cases[1]["prompt_ids"]);
  const auto cont = test::ids(cases[1]["target_greedy_96"]);
  KvStore kv(m.kv_config(64));
  DirectKvWriter writer(kv);
  Logits logits;
  std::vector<std::vector<float>> got;
  for (int threads : {1, 2}) {
    cpu::set_num_threads(threads);
    const SeqId a = start(m, kv, prompt, 16, logits);
    kv.reserve(a, kv.length(a) + 16);
    const ForwardWindow w{a, std::span(cont).first(16), LogitsMode::all};
    m.forward({&w, 1}, kv, writer, logits);
    got.push_back(copy(logits.row(0, 0)));
    for (int i = 1; i < 16; ++i) {
      const auto row = logits.row(0, i);
      got.back().insert(got.back().end(), row.begin(), row.end());
    }
  }
  cpu::set_num_threads(2);
  ASSERT_EQ(got[0].size(), got[1].size());
  ASSERT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)));
}

// The phase profile (bench/cpu_floor_bench --phases) only reads the clock: the logits are
// the same bits with it attached, its phases sum to the forwards' time, and the
// layer-wise prefill and forwards after it is detached add nothing.
TEST_P(Invariance, PhaseProfileLeavesTheLogitsAndTimesEveryPhase) {
  Transformer& m = test::model(GetParam());
  const auto& cases = test::golden_public()["cases"];
  const auto prompt = test::ids(cases[1]["prompt_ids"]);
  const auto cont = test::ids(cases[1]["target_greedy_96"]);
  KvStore kv(m.kv_config(64));
  DirectKvWriter writer(kv);
  Logits logits;
  const SeqId a = start(m, kv, prompt, 16, logits);
  kv.reserve(a, kv.length(a) + 5);
  const ForwardWindow w{a, std::span(cont).first(5), LogitsMode::all};
  m.forward({&w, 1}, kv, writer, logits);
  const std::vector<float> plain = copy(logits.row(0, 4));

  ForwardPhaseProfile profile;
  m.set_phase_profile(&profile);
  const int64_t t0 = ForwardPhaseProfile::now_ns();
  m.forward({&w, 1}, kv, writer, logits);
  m.forward({&w, 1}, kv, writer, logits);
  const int64_t elapsed = ForwardPhaseProfile::now_ns() - t0;
  const auto row = logits.row(0, 4);
  ASSERT_EQ(0, std::memcmp(row.data(), plain.data(), row.size_bytes()));
  EXPECT_EQ(profile.forwards, 2);
  for (int ph : {ForwardPhaseProfile::norm, ForwardPhaseProfile::qkv, ForwardPhaseProfile::attention,
                 ForwardPhaseProfile::o_proj, ForwardPhaseProfile::gate_up, ForwardPhaseProfile::silu,
                 ForwardPhaseProfile::down, ForwardPhaseProfile::lm_head})
    EXPECT_GT(profile.ns[static_cast<size_t>(ph)], 0) << ForwardPhaseProfile::kNames[static_cast<size_t>(ph)];
  EXPECT_LE(profile.total_ns(), elapsed);
  const ForwardPhaseProfile timed = profile;
  Logits layer_logits;
  KvStore kv2(m.kv_config(64));
  const SeqId b = kv2.add_sequence({});
  kv2.reserve(b, static_cast<int32_t>(prompt.size()));
  DirectKvWriter writer2(kv2);
  m.prefill_layerwise(b, prompt, kv2, writer2, layer_logits);  // never timed
  m.set_phase_profile(nullptr);
  m.forward({&w, 1}, kv, writer, logits);
  EXPECT_EQ(profile.forwards, timed.forwards);
  EXPECT_EQ(profile.ns, timed.ns);
}

INSTANTIATE_TEST_SUITE_P(Models, Invariance, ::testing::Values("demo-target", "demo-draft", "llama-tiny-random"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           for (char& ch : name) if (ch == '-') ch = '_';
                           return name;
                         });

}  // namespace
}  // namespace specpipe
