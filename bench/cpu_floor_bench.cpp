// One model's CPU decode step and verify windows against the memory floor measured in
// the same run (bench/llama_cpp_peer.sh runs it; docs/BENCHMARKS.md section 1).
//
// The floor of a forward at `context` tokens is the bytes it must read once -- every
// matrix and the LM head in their stored dtype, plus the float32 K/V of the context and
// the window -- divided by the read bandwidth (bench/memory_bandwidth.h) measured here.
// A window of n tokens reads the same bytes as a 1-token step, so on a memory-bound
// model it should cost little more than one step.
//
// Each figure is given twice: by wall time, and by process CPU time / threads
// (core/cpu_timer.h), which on a machine shared with other work approximates the time
// the threads would take running alone; the floor is computed both ways too.
//
// With --phases, further rounds (after the timed ones, which run untimed by phase) time
// every forward phase by phase (model/forward_phases.h: the norms, each GEMM region,
// QK-norm + RoPE, K/V write, attention, silu, LM head) and print ms per forward of each
// phase for each window size. Without it the forward's phase boundaries are a null test.
//
// Usage: cpu_floor_bench --model DIR [--context 256] [--windows 1,5] [--repeat 5] [--phases] [--json F]
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <vector>

#include "bench/memory_bandwidth.h"
#include "core/cpu_timer.h"
#include "core/timer.h"
#include "kernels/cpu/thread_pool.h"
#include "kvstore/kv_write_sink.h"
#include "model/forward_phases.h"
#include "model/load_model.h"
#include "pipeline/prefill.h"

namespace specpipe {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const std::string& model_arg, int32_t context, const std::vector<int32_t>& windows, int32_t repeat,
        double min_ms, bool phases, const std::string& json_out) {
  auto model = load_transformer(resolve_model_dir(model_arg));
  const ModelConfig& c = model->config();
  const int32_t widest = *std::max_element(windows.begin(), windows.end());
  KvStore kv(model->kv_config((context + widest) / 16 + 4));
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < context; ++i) prompt.push_back(100 + (i * 37) % (c.vocab_size - 100));
  const SeqId seq = kv.add_sequence(prompt);
  Logits logits;
  prefill(*model, kv, seq, prompt, 256, logits);
  kv.reserve(seq, context + widest);
  DirectKvWriter writer(kv);  // every forward writes positions [context, context + n): the context stays fixed

  auto forward = [&](int32_t n) {
    const std::vector<int32_t> tokens(static_cast<size_t>(n), 42);
    const ForwardWindow w{seq, tokens, n == 1 ? LogitsMode::last : LogitsMode::all};
    model->forward({&w, 1}, kv, writer, logits);
  };
  for (int32_t n : windows) forward(n);  // warm-up: page in weights, grow scratch
  // Rounds alternate between the window sizes, so load from other processes on a shared
  // machine falls on all of them alike; each round runs one size for >= min_ms.
  std::map<int32_t, std::vector<double>> ms, cpu_ms;
  const double threads = cpu::num_threads();
  for (int32_t r = 0; r < repeat; ++r)
    for (int32_t n : windows) {
      int64_t iters = 0;
      Stopwatch clock;
      const CpuStopwatch cpu_clock;
      do {
        forward(n);
        ++iters;
      } while (clock.elapsed_ms() < min_ms);
      ms[n].push_back(clock.elapsed_ms() / static_cast<double>(iters));
      cpu_ms[n].push_back(cpu_clock.elapsed_ms() / threads / static_cast<double>(iters));
    }
  const bench::ReadBandwidth bw = bench::measure_read_bandwidth();
  const auto weight_bytes = static_cast<double>(model->weights().bytes_read_per_token());
  // float32 K and V of every layer for each position attended
  const double kv_bytes_per_pos = 2.0 * static_cast<double>(c.num_layers) * static_cast<double>(c.kv_dim()) * 4.0;

  nlohmann::json rows = nlohmann::json::array();
  const double step_ms = median(ms[windows.front()]), step_cpu_ms = median(cpu_ms[windows.front()]);
  std::printf("%s: %.1f MB weights, context %d, read bandwidth %.1f GB/s (by CPU time %.1f), %d threads\n",
              model_arg.c_str(), weight_bytes / 1e6, context, bw.wall_Bps / 1e9, bw.cpu_Bps / 1e9, cpu::num_threads());
  std::printf("%8s %10s %10s %9s %12s | by CPU time: %8s %9s %9s %12s\n", "window", "ms", "floor ms", "x floor",
              "x 1st size", "ms", "floor ms", "x floor", "x 1st size");
  for (int32_t n : windows) {
    const double bytes = weight_bytes + kv_bytes_per_pos * (context + n);
    const double floor_ms = bytes / bw.wall_Bps * 1e3, t = median(ms[n]);
    const double cpu_floor_ms = bytes / bw.cpu_Bps * 1e3, tc = median(cpu_ms[n]);
    std::printf("%8d %10.3f %10.3f %9.3f %12.3f | %21.3f %9.3f %9.3f %12.3f\n", n, t, floor_ms, t / floor_ms,
                t / step_ms, tc, cpu_floor_ms, tc / cpu_floor_ms, tc / step_cpu_ms);
    rows.push_back({{"window", n}, {"ms", t}, {"ms_runs", ms[n]}, {"bytes_read", bytes}, {"floor_ms", floor_ms},
                    {"x_floor", t / floor_ms}, {"x_first_window", t / step_ms}, {"cpu_ms", tc},
                    {"cpu_ms_runs", cpu_ms[n]}, {"cpu_floor_ms", cpu_floor_ms}, {"cpu_x_floor", tc / cpu_floor_ms},
                    {"cpu_x_first_window", tc / step_cpu_ms}});
  }
  nlohmann::json phase_rows = nlohmann::json::object();
  if (phases) {
    // Rounds alternate between the sizes as above; the profile is attached to these only.
    std::map<int32_t, ForwardPhaseProfile> prof;
    for (int32_t r = 0; r < repeat; ++r)
      for (int32_t n : windows) {
        model->set_phase_profile(&prof[n]);
        Stopwatch clock;
        do forward(n);
        while (clock.elapsed_ms() < min_ms);
      }
    model->set_phase_profile(nullptr);
    std::printf("\nms per forward by phase (wall time on the calling thread, %d rounds):\n%-14s", repeat, "phase");
    for (int32_t n : windows) std::printf(" %9s%-3d", "window ", n);
    std::printf(" %12s\n", "x 1st size");
    const ForwardPhaseProfile& first = prof[windows.front()];
    auto per_fwd = [](const ForwardPhaseProfile& p, int64_t ns) {
      return static_cast<double>(ns) / 1e6 / static_cast<double>(std::max<int64_t>(1, p.forwards));
    };
    for (int ph = 0; ph <= ForwardPhaseProfile::count; ++ph) {
      const bool total = ph == ForwardPhaseProfile::count;
      std::printf("%-14s", total ? "total" : ForwardPhaseProfile::kNames[static_cast<size_t>(ph)]);
      for (int32_t n : windows) {
        const ForwardPhaseProfile& p = prof[n];
        const double v = per_fwd(p, total ? p.total_ns() : p.ns[static_cast<size_t>(ph)]);
        std::printf(" %12.3f", v);
        phase_rows[std::to_string(n)][total ? "total" : ForwardPhaseProfile::kNames[static_cast<size_t>(ph)]] = v;
      }
      const ForwardPhaseProfile& last = prof[windows.back()];
      const double a = per_fwd(first, total ? first.total_ns() : first.ns[static_cast<size_t>(ph)]);
      const double b = per_fwd(last, total ? last.total_ns() : last.ns[static_cast<size_t>(ph)]);
      std::printf(" %12.3f\n", a > 0 ? b / a : 0.0);
    }
  }
  const nlohmann::json doc = {{"model", model_arg}, {"context", context}, {"threads", cpu::num_threads()},
                              {"read_bandwidth_Bps", bw.wall_Bps}, {"read_bandwidth_cpu_Bps", bw.cpu_Bps},
                              {"weight_bytes", weight_bytes},
                              {"kv_bytes_per_position", kv_bytes_per_pos}, {"repeat", repeat}, {"windows", rows},
                              {"phases_ms", phase_rows}};
  if (!json_out.empty()) std::ofstream(json_out) << doc.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace specpipe

int main(int argc, char** argv) {
  CLI::App app("CPU decode step and verify windows against the measured memory floor");
  std::string model, json_out;
  int32_t context = 256, repeat = 5, threads = 0;
  double min_ms = 300;
  std::vector<int32_t> windows = {1, 5};
  app.add_option("--model", model, "checkpoint directory or name under models/")->required();
  app.add_option("--context", context, "tokens of context before the window")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--windows", windows, "window sizes (the first is the baseline)")->delimiter(',')->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--repeat", repeat, "rounds over the sizes (medians)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--min-ms", min_ms, "time per size per round")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--threads", threads, "kernel threads (0: $SPECPIPE_THREADS or all cores)");
  bool phases = false;
  app.add_flag("--phases", phases,
               "after the timed rounds, time each forward phase (norms, GEMM regions, QK-norm + RoPE, K/V write, "
               "attention, silu, LM head) in as many rounds and print ms per forward by phase");
  app.add_option("--json", json_out, "write the JSON report here");
  CLI11_PARSE(app, argc, argv);
  specpipe::cpu::set_num_threads(threads);
  try {
    return specpipe::run(model, context, windows, repeat, min_ms, phases, json_out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu_floor_bench: %s\n", e.what());
    return 1;
  }
}
