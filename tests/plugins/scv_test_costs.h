#pragma once
/// Test support for SCV (plugins/scv): the round costs its tests plan with and the small
/// helpers that build them, shared by scv_planner_test.cpp, scv_instance_test.cpp,
/// scv_plugin_test.cpp and scv_serving_test.cpp.
///
/// The recorded costs are an H100's, not this machine's:
///  - kSection8: the demo pair served at 1, 8, 32 and 128 clients (27dbc09), tokens/s plain
///    and with the draft model at gamma 2, 4, 6, and tokens a round; docs/BENCHMARKS.md
///    section 8, "Recorded device costs", gives the same table and the round times it
///    implies (a round's wall time is clients x tokens per round / tokens per second).
///  - kOneClientRoundMs: one client's round by gamma 0..6 (stop 30/31's calls, 478039c:
///    plain 0.218, gamma 2 0.386, gamma 3 0.475 ms; 4 and 6 scaled from gamma 2 as in
///    27dbc09's call, 1 between; in docs/BENCHMARKS.md section 8 until 9d53cfc condensed
///    it). Not a line: the first draft pays the drafter's launch, long chains outrun the
///    verify beside them.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "plugins/scv/scv_planner.h"
#include "specpipe/plugin.h"

namespace scv_test {

using specpipe::scv::RoundCosts;
using specpipe::scv::RoundPlan;
using specpipe::scv::WindowRequest;
using Gammas = std::vector<int32_t>;

/// One level of the demo pair through the server on an H100 (27dbc09).
struct MeasuredLevel {
  int32_t clients;
  double plain_tokens_per_s;
  double draft_tokens_per_s[3];  // gamma 2, 4, 6
  double tokens_per_round[3];
};
inline constexpr MeasuredLevel kSection8[] = {
    {1, 3786, {6676, 6732, 5494}, {2.47, 3.46, 4.06}},
    {8, 27335, {20704, 22065, 20968}, {2.40, 3.24, 3.76}},
    {32, 52533, {52732, 46750, 41288}, {2.47, 3.46, 4.06}},
    {128, 93537, {66507, 64316, 58929}, {2.47, 3.46, 4.06}},
};

/// One client's round on an H100 by gamma 0..6, ms.
inline constexpr std::array<double, 7> kOneClientRoundMs = {0.218, 0.31, 0.386, 0.475, 0.536, 0.65, 0.77};

inline RoundCosts costs(double draft, double base, double token, int32_t budget = 0, double draft_base = 0) {
  return RoundCosts{draft, base, token, budget, draft_base, {}};
}

/// n windows of the same acceptance, cap and requested gamma.
inline std::vector<WindowRequest> uniform(size_t n, double acceptance, int32_t cap, int32_t requested = 4) {
  return std::vector<WindowRequest>(n, WindowRequest{acceptance, cap, requested});
}

/// The verify window tokens of a round: 1 + gamma a sequence.
inline int64_t window_tokens(const Gammas& g) {
  int64_t t = 0;
  for (int32_t x : g) t += 1 + x;
  return t;
}

inline RoundPlan plan(const std::vector<WindowRequest>& w, const RoundCosts& c, double min_gain = 0.01) {
  return specpipe::scv::plan_round(w, c, specpipe::scv::PlannerOptions{min_gain});
}

/// One sequence on an H100: what SCV's line said (verify 0.155 ms + 0.065 a window token,
/// drafting free: the drafting rounds' lower third were those whose draft-ahead chain had
/// the drafts ready) and the rounds measured by gamma (kOneClientRoundMs), which bend.
inline RoundCosts one_client_costs() {
  RoundCosts c = costs(0, 0.155, 0.065);
  c.round_ms_by_gamma.assign(kOneClientRoundMs.begin(), kOneClientRoundMs.end());
  return c;
}

/// A sequence as the host hands it to verify_plan (100 tokens of context).
inline specpipe_plan_sequence seq(int64_t id, int32_t max_gamma = 8, int32_t requested = 4) {
  return specpipe_plan_sequence{id, requested, max_gamma, 100};
}

}  // namespace scv_test
