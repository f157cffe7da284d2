// CPU decode and prefill speed of the demo models, with the memory-bandwidth floor
// measured in the same run. Run: build/bench/cpu_model_bench (docs/BENCHMARKS.md).
//
// Counters: tok_per_s; ms_per_tok; floor_ms = weight bytes read per token / measured
// read bandwidth; x_floor = ms_per_tok / floor_ms (1.0 = at the floor).
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/memory_bandwidth.h"
#include "core/timer.h"
#include "kvstore/kv_write_sink.h"
#include "model/load_model.h"
#include "pipeline/prefill.h"

namespace specpipe {
namespace {

double bandwidth() {
  static const double bw = bench::measure_read_bandwidth().wall_Bps;
  return bw;
}

Transformer& model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Transformer>> cache;
  auto& m = cache[name];
  if (!m) m = load_transformer(resolve_model_dir(name));
  return *m;
}

std::vector<int32_t> synthetic_prompt(int32_t n) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(100 + (i * 37) % 5000);
  return p;
}

// Decode: one token per step after a prompt of `context` tokens; the KV is rolled back
// after each step so the context length stays fixed.
void BM_Decode(benchmark::State& state, const std::string& name) {
  Transformer& m = model(name);
  const int32_t context = static_cast<int32_t>(state.range(0));
  KvStore kv(m.kv_config(context / 16 + 4));
  const auto prompt = synthetic_prompt(context);
  const SeqId seq = kv.add_sequence(prompt);
  Logits logits;
  prefill(m, kv, seq, prompt, 256, logits);
  DirectKvWriter writer(kv);
  const int32_t token = 42;
  kv.reserve(seq, context + 1);
  Stopwatch clock;
  for (auto _ : state) {
    const ForwardWindow w{seq, {&token, 1}, LogitsMode::last};
    m.forward({&w, 1}, kv, writer, logits);
    benchmark::DoNotOptimize(logits.row(0).data());
  }
  const double ms_per_tok = clock.elapsed_ms() / static_cast<double>(state.iterations());
  const double floor_ms = static_cast<double>(m.weights().bytes_read_per_token()) / bandwidth() * 1e3;
  state.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["ms_per_tok"] = ms_per_tok;
  state.counters["floor_ms"] = floor_ms;
  state.counters["x_floor"] = ms_per_tok / floor_ms;
  state.counters["weight_MB"] = static_cast<double>(m.weights().bytes_read_per_token()) / 1e6;
  state.counters["bandwidth_GBps"] = bandwidth() / 1e9;
}

// Prefill: a window of `tokens` prompt tokens from an empty sequence.
void BM_Prefill(benchmark::State& state, const std::string& name) {
  Transformer& m = model(name);
  const int32_t n = static_cast<int32_t>(state.range(0));
  KvStoreConfig config = m.kv_config(n / 16 + 4);
  config.prefix_cache = false;  // measure the compute, not cache hits
  KvStore kv(config);
  const auto prompt = synthetic_prompt(n);
  Logits logits;
  for (auto _ : state) {
    const SeqId seq = kv.add_sequence(prompt);
    prefill(m, kv, seq, prompt, 512, logits);
    kv.release(seq);
  }
  state.counters["tok_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}

// Verify-window cost: a window of n tokens at a fixed context, relative to decode.
void BM_Window(benchmark::State& state, const std::string& name) {
  Transformer& m = model(name);
  const int32_t n = static_cast<int32_t>(state.range(0)), context = 256;
  KvStore kv(m.kv_config(context / 16 + 4));
  const auto prompt = synthetic_prompt(context);
  const SeqId seq = kv.add_sequence(prompt);
  Logits logits;
  prefill(m, kv, seq, prompt, 256, logits);
  DirectKvWriter writer(kv);
  const std::vector<int32_t> window(static_cast<size_t>(n), 42);
  kv.reserve(seq, context + n);
  for (auto _ : state) {
    const ForwardWindow w{seq, window, LogitsMode::all};
    m.forward({&w, 1}, kv, writer, logits);
  }
}

}  // namespace
}  // namespace specpipe

int main(int argc, char** argv) {
  using namespace specpipe;
  for (const char* name : {"demo-target", "demo-draft"}) {
    benchmark::RegisterBenchmark((std::string("decode/") + name).c_str(), BM_Decode, name)
        ->Arg(128)->Arg(1024)->Unit(benchmark::kMillisecond)->MinTime(2.0);
    benchmark::RegisterBenchmark((std::string("prefill/") + name).c_str(), BM_Prefill, name)
        ->Arg(512)->Arg(2048)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("window/") + name).c_str(), BM_Window, name)
        ->DenseRange(1, 9)->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
