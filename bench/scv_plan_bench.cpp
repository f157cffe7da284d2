// SCV's per-round planning time (plan_round, on the scheduler's critical path before each
// round) by batch size, with and without the bound that ends the search where no draft
// length could beat plain (PlannerOptions::bound_first). Costs: the draft model's line at
// 128 clients on an H100 (docs/BENCHMARKS.md section 8, "Recorded device costs"), where
// drafting does not pay; acceptances spread over 0.2-0.95, caps of 8.
//   build/bench/scv_plan_bench
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "plugins/scv/scv_planner.h"

namespace {

using specpipe::scv::PlannerOptions;
using specpipe::scv::RoundCosts;
using specpipe::scv::WindowRequest;

void plan_round(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> acceptance(0.2, 0.95);
  std::vector<WindowRequest> windows(n);
  for (WindowRequest& w : windows) w = {acceptance(rng), 8, 4};
  // draft step 1.02 ms, verify 0.3 ms + 8.3 us a window token, 1.39 ms once a round drafts.
  const RoundCosts costs{1.02, 0.3, 0.0083, 0, 1.39, {}};
  PlannerOptions options;
  options.bound_first = state.range(1) != 0;
  for (auto _ : state) benchmark::DoNotOptimize(specpipe::scv::plan_round(windows, costs, options));
}
BENCHMARK(plan_round)->ArgNames({"batch", "bound"})->ArgsProduct({{1, 8, 32, 128}, {0, 1}});

}  // namespace

BENCHMARK_MAIN();
