// The strategy plugins measured (docs/BENCHMARKS.md section 4):
//  - NWOR: pool bytes written per generated token with the direct path and with NWOR,
//    against the (k+1)/(gamma+1) expected from the measured acceptance;
//  - SCV: tok/s against every fixed gamma (the best one and gamma 4) on two prompt sets
//    of different predictability (the code prompts, and the same tokens shuffled), at
//    batch 1 and batch 16.
// Every configuration runs in this one process, outputs are checked identical to plain
// greedy, and each figure is the median of --repeat runs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>

#include "actors/engine.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/timer.h"
#include "kernels/cpu/thread_pool.h"

namespace specpipe {
namespace {

struct Options {
  std::string prompts = std::string(SPECPIPE_SOURCE_DIR) + "/bench/prompts/public.jsonl";
  std::vector<int32_t> gammas = {1, 2, 3, 4, 6, 8};
  std::vector<int32_t> batches = {1, 16};
  int32_t max_tokens = 64;
  int32_t repeat = 3;
  std::vector<std::string> sections = {"nwor", "scv"};
  std::string json_out;
};

using PromptSet = std::vector<std::vector<int32_t>>;

PromptSet load_prompt_ids(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(ErrorCode::not_found, "prompt file {} cannot be read", path);
  PromptSet out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("prompt_ids").get<std::vector<int32_t>>());
  return out;
}

/// The same tokens in a seeded random order: the draft can no longer follow the text.
PromptSet shuffled(PromptSet set) {
  std::mt19937 rng(20261122);
  for (auto& p : set) std::shuffle(p.begin(), p.end(), rng);
  return set;
}

struct Strategy {
  std::string name;  // "plain", "gamma N", "scv", "nwor gamma N"
  int32_t gamma = 4;
  bool speculate = true, scv = false, nwor = false;
};

PipelineConfig config_for(const Strategy& s) {
  PipelineConfig c;
  c.log_level = "warn";
  c.drafter.type = s.speculate ? DrafterKind::model : DrafterKind::none;
  c.drafter.gamma = s.gamma;
  if (s.scv) {
    c.plugins.push_back({"scv", SCV_PLUGIN_PATH, "{}"});
    c.slots.verify_plan = "scv";
  }
  if (s.nwor) {
    c.plugins.push_back({"nwor", NWOR_PLUGIN_PATH, "{}"});
    c.slots.kv_write = "nwor";
  }
  return c;
}

struct RunResult {
  double tok_per_s = 0;
  SpecStats stats;  // merged over the requests
  std::vector<std::vector<int32_t>> outputs;
};

/// Runs every prompt, `batch` requests in flight at a time; tok/s over the wall time.
RunResult run_once(actors::Engine& engine, const PromptSet& prompts, int32_t batch, int32_t max_tokens) {
  RunResult r;
  r.outputs.resize(prompts.size());
  std::mutex mutex;
  std::condition_variable cv;
  size_t done = 0;
  Stopwatch wall;
  for (size_t first = 0; first < prompts.size(); first += static_cast<size_t>(batch)) {
    const size_t last = std::min(prompts.size(), first + static_cast<size_t>(batch));
    for (size_t i = first; i < last; ++i) {
      actors::RequestSpec spec;
      spec.prompt = prompts[i];
      spec.params.max_tokens = max_tokens;
      spec.params.stop_at_eos = false;
      engine.submit(std::move(spec), std::make_shared<actors::CallbackSink>(nullptr, [&, i](const actors::Completion& c) {
                      std::lock_guard lock(mutex);
                      if (c.reason == FinishReason::error) fmt::print(stderr, "request failed: {}\n", c.error);
                      r.outputs[i] = c.tokens;
                      r.stats.merge(c.stats);
                      ++done;
                      cv.notify_all();
                    }));
    }
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return done == last; });
  }
  r.tok_per_s = static_cast<double>(r.stats.generated) * 1000.0 / wall.elapsed_ms();
  return r;
}

struct Measured {
  RunResult run;       // the median run
  nlohmann::json kv;   // the kv_write slot's metrics after the last run
  nlohmann::json plan;  // the verify_plan slot's
};

Measured measure(const Strategy& s, const PromptSet& prompts, int32_t batch, const Options& o) {
  actors::Engine engine(config_for(s));
  run_once(engine, prompts, batch, o.max_tokens);  // warm-up
  std::vector<RunResult> runs;
  for (int32_t i = 0; i < o.repeat; ++i) runs.push_back(run_once(engine, prompts, batch, o.max_tokens));
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.tok_per_s < b.tok_per_s; });
  const nlohmann::json m = engine.strategy_metrics();
  return {runs[runs.size() / 2], m["kv_write"], m["verify_plan"]};
}

/// NWOR: decode-phase pool bytes per generated token, direct vs NWOR, at each gamma.
nlohmann::json nwor_section(const PromptSet& prompts, const Options& o) {
  std::printf("NWOR: pool bytes written per generated token (decode rounds; prefill excluded), batch 1\n");
  std::printf("%5s %10s %12s %12s %8s %10s %10s\n", "gamma", "accept %", "direct B/tok", "nwor B/tok", "ratio",
              "expected", "identical");
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t g : {2, 4, 8}) {
    const Measured direct = measure({"gamma", g}, prompts, 1, o);
    const Measured nwor = measure({"nwor", g, true, false, true}, prompts, 1, o);
    auto per_token = [](const Measured& m) {
      const int64_t round_rows =
          m.kv["pool_rows_written"].get<int64_t>() - m.kv["prefill_rows_written"].get<int64_t>();
      const double row_bytes = m.kv["pool_bytes_written"].get<double>() /
                               std::max<double>(1.0, m.kv["pool_rows_written"].get<double>());
      // The metrics add up warm-up and every repetition: divide by all their tokens.
      return static_cast<double>(round_rows) * row_bytes / static_cast<double>(m.run.stats.generated);
    };
    const double runs = 1.0 + o.repeat;
    const double d = per_token(direct) / runs, n = per_token(nwor) / runs;
    const SpecStats& st = nwor.run.stats;
    // Committed rows per window (k + 1) over staged rows per window (gamma + 1).
    const double expected = static_cast<double>(st.accepted + st.rounds) / static_cast<double>(st.proposed + st.rounds);
    const bool identical = direct.run.outputs == nwor.run.outputs;
    std::printf("%5d %10.1f %12.0f %12.0f %8.3f %10.3f %10s\n", g, 100 * st.acceptance_rate(), d, n, n / d, expected,
                identical ? "yes" : "NO");
    rows.push_back({{"gamma", g}, {"acceptance_rate", st.acceptance_rate()}, {"direct_bytes_per_token", d},
                    {"nwor_bytes_per_token", n}, {"ratio", n / d}, {"expected_ratio", expected},
                    {"identical", identical}, {"nwor_metrics", nwor.kv}});
  }
  return rows;
}

/// SCV against the fixed gammas on one prompt set at one batch size.
nlohmann::json scv_section(const std::string& set_name, const PromptSet& prompts, int32_t batch, const Options& o,
                           bool& all_identical) {
  const Measured plain = measure({"plain", 0, false}, prompts, batch, o);
  std::vector<std::pair<Strategy, Measured>> rows;
  for (int32_t g : o.gammas) rows.emplace_back(Strategy{fmt::format("gamma {}", g), g}, Measured{});
  rows.emplace_back(Strategy{"scv", 4, true, true}, Measured{});
  for (auto& [s, m] : rows) m = measure(s, prompts, batch, o);
  std::printf("\n%s prompts, batch %d (plain %.1f tok/s)\n", set_name.c_str(), batch, plain.run.tok_per_s);
  std::printf("%-10s %9s %8s %9s %9s %10s\n", "strategy", "tok/s", "vs plain", "accept %", "tok/step", "identical");
  nlohmann::json out = {{"prompts", set_name}, {"batch", batch}, {"plain_tok_per_s", plain.run.tok_per_s}};
  double best = 0, gamma4 = 0, scv = 0;
  std::string best_name;
  for (const auto& [s, m] : rows) {
    const bool identical = m.run.outputs == plain.run.outputs;
    all_identical &= identical;
    std::printf("%-10s %9.1f %8.2f %9.1f %9.2f %10s\n", s.name.c_str(), m.run.tok_per_s,
                m.run.tok_per_s / plain.run.tok_per_s, 100 * m.run.stats.acceptance_rate(),
                m.run.stats.tokens_per_step(), identical ? "yes" : "NO");
    nlohmann::json row = {{"strategy", s.name}, {"tok_per_s", m.run.tok_per_s},
                          {"acceptance_rate", m.run.stats.acceptance_rate()},
                          {"tokens_per_step", m.run.stats.tokens_per_step()}, {"identical", identical}};
    if (s.scv) {
      row["scv_metrics"] = m.plan;
      scv = m.run.tok_per_s;
    } else if (m.run.tok_per_s > best) {
      best = m.run.tok_per_s;
      best_name = s.name;
    }
    if (!s.scv && s.gamma == 4) gamma4 = m.run.tok_per_s;
    out["rows"].push_back(row);
  }
  std::printf("scv / best fixed (%s) = %.3f, scv / gamma 4 = %.3f\n", best_name.c_str(), scv / best, scv / gamma4);
  out["best_fixed"] = best_name;
  out["scv_over_best_fixed"] = scv / best;
  out["scv_over_gamma4"] = scv / gamma4;
  return out;
}

int run(const Options& o) {
  Stopwatch total;
  const PromptSet code = load_prompt_ids(o.prompts);
  const PromptSet text = shuffled(code);
  std::printf("%zu prompts, %d new tokens each, median of %d runs, %d kernel threads\n\n", code.size(), o.max_tokens,
              o.repeat, cpu::num_threads());
  nlohmann::json doc = {{"prompts", o.prompts}, {"max_tokens", o.max_tokens}, {"repeat", o.repeat},
                        {"threads", cpu::num_threads()}};
  auto wanted = [&](const char* name) { return std::find(o.sections.begin(), o.sections.end(), name) != o.sections.end(); };
  if (wanted("nwor")) doc["nwor"] = nwor_section(code, o);
  bool identical = true;
  for (int32_t batch : o.batches) {
    if (!wanted("scv")) break;
    doc["scv"].push_back(scv_section("code", code, batch, o, identical));
    doc["scv"].push_back(scv_section("shuffled", text, batch, o, identical));
  }
  doc["wall_s"] = total.elapsed_ms() / 1000;
  if (!o.json_out.empty()) std::ofstream(o.json_out) << doc.dump(2) << "\n";
  std::printf("\nwall %.0f s%s\n", total.elapsed_ms() / 1000, o.json_out.empty() ? "" : (", JSON: " + o.json_out).c_str());
  return identical ? 0 : 3;
}

}  // namespace
}  // namespace specpipe

int main(int argc, char** argv) {
  specpipe::Options o;
  CLI::App app{"NWOR pool traffic and SCV vs fixed gamma (docs/BENCHMARKS.md section 4)"};
  app.add_option("--prompts", o.prompts, "JSONL file with prompt_ids per line")->capture_default_str();
  app.add_option("--gammas", o.gammas, "fixed gammas to compare SCV with")->delimiter(',')->capture_default_str();
  app.add_option("--batches", o.batches, "requests in flight")->delimiter(',')->capture_default_str();
  app.add_option("--max-tokens", o.max_tokens, "new tokens per request")->capture_default_str();
  app.add_option("--repeat", o.repeat, "runs per configuration (median reported)")->capture_default_str();
  app.add_option("--sections", o.sections, "what to measure: nwor, scv")->delimiter(',')->capture_default_str();
  app.add_option("--json", o.json_out, "write the JSON report here");
  CLI11_PARSE(app, argc, argv);
  try {
    specpipe::init_logging("warn");
    return specpipe::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
