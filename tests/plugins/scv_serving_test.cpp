// SCV as a server runs it, on the CPU with recorded device costs: the SCV instance and the
// scheduler's CostModel together, over the levels tools/gpu/serve_load.sh drives (1, 8,
// 32 and 128 clients, requests of 64 tokens back to back, one server for all levels),
// against plain and the fixed gammas on the same simulated device. What a round costs is
// the H100's (docs/BENCHMARKS.md section 8: a round's wall time by batch size, without
// drafts and at gamma 2, 4 and 6; at one client by gamma, bending as the device's does),
// and what made SCV lose there is in it too: a shape's first rounds run eagerly or capture
// a CUDA graph (slow), a sequence's first drafting round (and its first after a pause)
// carries the draft model's catch-up, a longer gamma than the last round's misses the
// draft-ahead chain, and each prompt has its own acceptance. The
// scheduler's part (actors/scheduler_actor.cpp) is mirrored: a plain round where
// CostModel::plain_due says so, catch-up rounds kept for what they cost beyond a usual
// round only, per-sequence
// acceptance fed back.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pipeline/verify_planner.h"
#include "plugins/scv/scv_config.h"
#include "plugins/scv/scv_instance.h"
#include "scv_test_costs.h"

namespace scv_serving {
namespace {

/// A round's wall time on the H100 by batch size, from scv_test::kSection8's tokens/s
/// (clients x tokens per round / tokens per second): without drafts, and what drafting 2,
/// 4, 6 tokens a sequence adds (window tokens included); batch sizes between are
/// interpolated over log2.
struct Level {
  double clients, plain_ms, extra_ms[3];
};
constexpr Level level_of(const scv_test::MeasuredLevel& l) {
  Level out{static_cast<double>(l.clients), 1000.0 * l.clients / l.plain_tokens_per_s, {}};
  for (int k = 0; k < 3; ++k)
    out.extra_ms[k] = 1000.0 * l.clients * l.tokens_per_round[k] / l.draft_tokens_per_s[k] - out.plain_ms;
  return out;
}
constexpr std::array<Level, 4> kH100 = {level_of(scv_test::kSection8[0]), level_of(scv_test::kSection8[1]),
                                        level_of(scv_test::kSection8[2]), level_of(scv_test::kSection8[3])};
/// One client by gamma 0..6 (scv_test::kOneClientRoundMs): not a line.
constexpr const std::array<double, 7>& kOneClientMs = scv_test::kOneClientRoundMs;
/// Each public prompt's acceptance at one client (the draft model's tokens per round at
/// gamma 3, prompt by prompt, in the same call: 2.06-4.0); 0.82 on average.
constexpr std::array<double, 16> kPromptAcceptance = {0.85, 0.85, 0.89, 0.66, 0.96, 0.85, 0.66, 0.79,
                                                      0.76, 0.56, 0.85, 0.89, 0.85, 0.79, 0.92, 0.98};
// A forward shape's first round runs eagerly, its second captures a CUDA graph.
constexpr double kEagerMs = 1, kCaptureMs = 3;
constexpr double kCatchUpMs = 0.4;      // the draft model's catch-up on a prompt or a pause
// A largest gamma above the last round's: the draft-ahead chain made for the last one is
// missed, and the round drafts on its critical path (about a draft step a token).
constexpr double kMissedChainMsPerDraft = 0.03;

/// Device cost of a round of n sequences whose largest gamma is g.
double round_ms(int32_t n, int32_t g) {
  if (n <= 1) return kOneClientMs[static_cast<size_t>(std::min(g, 6))] + 0.11 * std::max(0, g - 6);
  const double x = std::log2(std::max(1, n));
  size_t hi = 1;
  while (hi + 1 < kH100.size() && std::log2(kH100[hi].clients) < x) ++hi;
  const Level& a = kH100[hi - 1];
  const Level& b = kH100[hi];
  const double t = std::clamp((x - std::log2(a.clients)) / (std::log2(b.clients) - std::log2(a.clients)), 0.0, 1.0);
  auto at = [&](const Level& l) {
    if (l.clients == 1) return round_ms(1, g);
    if (g <= 0) return l.plain_ms;
    // Through (0, 0), (2, e2), (4, e4), (6, e6), straight on beyond 6.
    const double points[4] = {0, l.extra_ms[0], l.extra_ms[1], l.extra_ms[2]};
    const int32_t k = std::min(g / 2, 2);
    const double extra = points[k] + (points[k + 1] - points[k]) * (g - 2 * k) / 2.0;
    return l.plain_ms + extra;
  };
  return at(a) + (at(b) - at(a)) * t;
}

/// One sequence in the simulated server.
struct Sequence {
  int64_t id = 0;
  int32_t left = 0;             // tokens still to generate
  int64_t rounds = 0;           // its own rounds so far
  int64_t drafted_round = -1;   // its own round count when it last drafted
  bool measured = false;        // counts towards the level's tokens/s (not the warm-up)
  double acceptance = 0;        // its prompt's
};

Sequence start(int64_t id, bool measured) {
  return {id, 64, 0, -1, measured, kPromptAcceptance[static_cast<size_t>(id) % kPromptAcceptance.size()]};
}

struct Result {
  std::map<int32_t, double> tokens_per_ms;  // by level
  std::map<int32_t, double> tokens_per_round;
};

struct Options {
  std::string scv_config = "{}";
  bool costs_by_gamma = true;  // false: SCV gets the line alone (before ABI 1.3)
  uint32_t seed = 7;
  std::vector<int32_t> levels = {1, 8, 32, 128};
};

/// Runs the levels on one server: `gamma` < 0 is SCV, else a fixed gamma.
Result serve(int32_t gamma, const Options& options) {
  specpipe::CostModel model;
  specpipe::scv::ScvInstance scv(specpipe::scv::parse_scv_config(options.scv_config, 6), nullptr);
  std::map<std::pair<int32_t, int32_t>, int> sightings;  // (batch, largest gamma) -> rounds
  std::mt19937 rng(options.seed);
  std::uniform_real_distribution<double> draw(0, 1);
  int64_t next_id = 1;
  int32_t last_top = 0;
  Result out;
  for (const int32_t clients : options.levels) {
    const int32_t per_client = clients == 1 ? 16 : clients == 128 ? 2 : 4;
    std::vector<int32_t> queued(static_cast<size_t>(clients), per_client + 1);  // + the warm-up
    std::vector<Sequence> running;
    std::vector<size_t> owner;  // running[i]'s client
    for (size_t c = 0; c < queued.size(); ++c) {
      running.push_back(start(next_id++, false));
      owner.push_back(c);
      --queued[c];
    }
    double ms = 0, tokens = 0, rounds = 0;
    while (!running.empty()) {
      const auto n = static_cast<int32_t>(running.size());
      std::vector<int32_t> g(running.size(), std::max(0, gamma));
      if (gamma < 0) {
        std::vector<specpipe_plan_sequence> s;
        for (const Sequence& q : running) s.push_back({q.id, 4, 6, 200});
        const specpipe::PlanCosts c = model.costs(n, 0);
        scv.plan(s,
                 specpipe::scv::RoundCosts{c.draft_step_ms, c.verify_base_ms, c.verify_token_ms, 0, c.draft_base_ms,
                                           options.costs_by_gamma ? c.round_ms_by_gamma : std::vector<double>{}},
                 g);
        if (model.plain_due(n)) std::fill(g.begin(), g.end(), 0);
      }
      const int32_t top = *std::max_element(g.begin(), g.end());
      double wall = round_ms(n, top);
      // At one sequence a draft length brings a few shapes (its verify window, the chain's
      // catch-up windows), each eager once and captured once.
      const int seen_before = sightings[{n, top}]++;
      const int slow = n == 1 && top > 0 ? 2 * (top + 2) : 2;
      if (seen_before < slow) wall += seen_before % 2 == 0 ? kEagerMs : kCaptureMs;
      if (n == 1 && top > last_top && last_top > 0) wall += kMissedChainMsPerDraft * top;
      last_top = top;
      bool catch_up = false;
      int64_t window = 0;
      std::vector<specpipe_plan_observation> seen;
      double round_tokens = 0, measured_tokens = 0;
      for (size_t i = 0; i < running.size(); ++i) {
        Sequence& q = running[i];
        ++q.rounds;
        window += 1 + g[i];
        int32_t k = 0;
        if (g[i] > 0) {
          catch_up = catch_up || q.drafted_round < 0 || q.rounds - q.drafted_round > 4;
          q.drafted_round = q.rounds;
          while (k < g[i] && draw(rng) < q.acceptance) ++k;
          seen.push_back({q.id, g[i], k});
        }
        const int32_t made = std::min(q.left, k + 1);
        q.left -= made;
        round_tokens += made;
        if (q.measured) measured_tokens += made;
      }
      if (catch_up) wall += kCatchUpMs;
      const double token_ms = 0.001 + 0.007 * std::log2(n) / 7;
      model.add_round({n, top, window, 0.2 * wall, 0.6 * round_ms(n, 0) + token_ms * static_cast<double>(window - n),
                       wall, catch_up});
      scv.observe(seen);
      // The level's clock runs from its first measured round (the warm-ups came first).
      if (measured_tokens > 0 || tokens > 0) {
        ms += wall;
        tokens += measured_tokens;
        rounds += 1;
      }
      for (size_t i = running.size(); i-- > 0;) {
        if (running[i].left > 0) continue;
        scv.forget(running[i].id);
        const size_t c = owner[i];
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        owner.erase(owner.begin() + static_cast<std::ptrdiff_t>(i));
        if (queued[c] > 0) {
          --queued[c];
          running.push_back(start(next_id++, true));
          owner.push_back(c);
        }
      }
    }
    out.tokens_per_ms[clients] = tokens / ms;
    out.tokens_per_round[clients] = tokens / std::max(1.0, rounds);
  }
  return out;
}

/// SCV's tokens/ms over the better of plain and the best fixed gamma, by level, the mean
/// over a few seeds; SCV fed the round costs by gamma at one client, or (false) the line
/// alone.
std::map<int32_t, double> ratios(bool costs_by_gamma) {
  std::map<int32_t, double> sum;
  constexpr uint32_t kSeeds = 4;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    Options o;
    o.seed = seed;
    o.costs_by_gamma = costs_by_gamma;
    const Result scv = serve(-1, o);
    std::map<int32_t, double> best;
    for (int32_t g : {0, 1, 2, 3, 4, 6})
      for (const auto& [clients, rate] : serve(g, o).tokens_per_ms) best[clients] = std::max(best[clients], rate);
    for (const auto& [clients, rate] : best) sum[clients] += scv.tokens_per_ms.at(clients) / rate / kSeeds;
  }
  return sum;
}

TEST(ScvServing, NearTheBetterOfPlainAndTheBestFixedGammaAtEveryLevel) {
  const std::map<int32_t, double> r = ratios(true), line = ratios(false);
  for (const auto& [clients, ratio] : r)
    std::printf("%d clients: SCV %.3f of the best (by the line alone %.3f)\n", clients, ratio, line.at(clients));
  // Under load plain is best and SCV keeps speculation off from its first rounds there.
  EXPECT_GE(r.at(32), 0.95);
  EXPECT_GE(r.at(128), 0.95);
  // One client: by its rounds measured per gamma and held steady (single_switch_gain)
  // about 0.91 of the best fixed gamma; by the line alone about 0.72, as on the device
  // (0.72-0.85 in stop 31's call): it drafts long where its estimate is high, and each
  // change misses the draft-ahead chain and meets a new length's first (slow) rounds.
  EXPECT_GE(r.at(1), 0.88);
  EXPECT_GT(r.at(1), line.at(1) + 0.1);
  // Eight clients: SCV drafts its first rounds there (costs borrowed from one client) and
  // then stays off; those rounds put the lock-step simulated clients out of step, and
  // their requests' ends then run through batch sizes each new (eager, captured).
  EXPECT_GE(r.at(8), 0.8);
  // The device's figures as the simulation replays them: gamma 2 1.35x plain at one
  // client (1.37x in stop 30's call), plain the best from 8 clients on.
  const Options o;
  const Result plain = serve(0, o), two = serve(2, o), four = serve(4, o);
  EXPECT_GT(two.tokens_per_ms.at(1), 1.3 * plain.tokens_per_ms.at(1));
  for (const int32_t clients : {8, 32, 128}) EXPECT_GT(plain.tokens_per_ms.at(clients), four.tokens_per_ms.at(clients));
}

}  // namespace
}  // namespace scv_serving
