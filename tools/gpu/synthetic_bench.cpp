// The synthetic-model benchmark (synthetic_bench.h).
#include "tools/gpu/synthetic_bench.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

using json = nlohmann::json;

double copy_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *a = nullptr, *b = nullptr;
  cuda_check(cudaMalloc(&a, bytes), "cudaMalloc");
  cuda_check(cudaMalloc(&b, bytes), "cudaMalloc");
  cuda_check(cudaMemset(a, 1, bytes), "memset");
  for (int i = 0; i < 2; ++i) cuda_check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
  const int reps = 10;
  const double ms = stream_ms([&] {
    for (int i = 0; i < reps; ++i) cuda_check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice), "copy");
  });
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(bytes) * reps / (ms / 1e3);
}

/// SPECPIPE_SYNTHETIC_QUICK=1 in the environment: graphs only, windows of 1 and 5 tokens,
/// no breakdown (a sweep of shapes x contexts x attention paths within one device call).
bool quick_bench() {
  const char* v = std::getenv("SPECPIPE_SYNTHETIC_QUICK");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

json synthetic_bench(const std::string& name, int32_t context, int32_t prefill_max, uint64_t seed, int iters,
                     CudaTransformerOptions opt, bool& ok) {
  json r;
  const bool quick = quick_bench();
  r["quick"] = quick;
  ModelConfig c = synthetic_model_config(name);
  r["model"] = name;
  r["max_position_embeddings"] = c.max_position_embeddings;
  r["rope_scaling"] = cpu::to_string(c.rope_scaling.type);
  if (context + 9 > c.max_position_embeddings) {
    // Past the checkpoint's positions (a 1M-token run of a 40,960-position shape): the
    // shape's cost does not depend on what the positions mean, so the table is extended.
    c.max_position_embeddings = context + 16;
    r["positions_raised_to"] = c.max_position_embeddings;
  }
  r["config"] = {{"hidden", c.hidden_size},     {"layers", c.num_layers},         {"heads", c.num_heads},
                 {"kv_heads", c.num_kv_heads},  {"head_dim", c.head_dim},         {"intermediate", c.intermediate_size},
                 {"vocab", c.vocab_size},       {"tied_embeddings", c.tie_word_embeddings}, {"qk_norm", c.qk_norm}};
  r["seed"] = seed;
  r["context"] = context;
  {
    int dev = 0;
    cudaDeviceProp prop{};
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&prop, dev);
    r["device"] = prop.name;
  }
  const double bw = copy_bandwidth();
  r["copy_bandwidth_GBps"] = bw / 1e9;
  const int32_t blocks = (context + 9 + 15) / 16 + 2;
  opt.copy_logits = false;
  const auto t_build = Clock::now();
  std::unique_ptr<CudaTransformer> m = CudaTransformer::random(c, seed, blocks, 16, opt);
  r["build_ms"] = ms_since(t_build);
  r["device_bytes"] = m->device_bytes();
  r["gemm_algorithms"] = m->gemm_algorithms();
  const auto mat_bytes = static_cast<double>(m->matrix_bytes_per_step());
  const double kv_bytes = static_cast<double>(context) * c.num_layers * 2.0 * static_cast<double>(c.kv_dim()) *
                          static_cast<double>(dtype_size(opt.kv_dtype));
  const double floor_us = mat_bytes / bw * 1e6;
  r["matrix_bytes_per_step"] = mat_bytes;
  r["kv_bytes_read_per_step"] = kv_bytes;
  r["floor_us"] = floor_us;
  r["floor_with_kv_us"] = (mat_bytes + kv_bytes) / bw * 1e6;

  KvStore kv(m->kv_config());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> tok(0, c.vocab_size - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(context));
  for (auto& t : prompt) t = tok(rng);
  CudaLogits lg;
  const SeqId s = kv.add_sequence(prompt);
  m->set_graphs(false);
  if (context <= prefill_max) {
    const auto t_pre = Clock::now();
    gpu_prefill(*m, kv, s, prompt, LogitsMode::none, lg);
    r["prefill_ms"] = ms_since(t_pre);
  } else {
    // The prefill's attention is quadratic in CUDA-core FP32 (minutes at 128K): past
    // prefill_max the context is only booked, its K/V left as allocated. A step's cost
    // does not depend on the values (no branch in the kernels reads them).
    kv.reserve(s, context);
    kv.commit(s, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(kv.length(s))));
    r["prefill_ms"] = nullptr;
    r["prefill"] = "skipped: context > --prefill-max; K/V values as allocated";
  }
  kv.reserve(s, kv.length(s) + 9);
  std::vector<int32_t> toks(9);
  for (auto& t : toks) t = tok(rng);

  // Graph vs eager: the same window, all logits rows, bit for bit.
  json ident = json::array();
  m->set_copy_logits(true);
  for (int32_t n : {1, 5, 9}) {
    if (quick && n == 9) continue;
    const ForwardWindow w{s, {toks.data(), static_cast<size_t>(n)}, LogitsMode::all};
    m->set_graphs(false);
    m->forward({&w, 1}, kv, lg);
    std::vector<float> eager;
    std::vector<int32_t> eager_ids;
    for (int32_t i = 0; i < n; ++i) {
      eager.insert(eager.end(), lg.row(0, i).begin(), lg.row(0, i).end());
      eager_ids.push_back(lg.argmax(0, i));
    }
    m->set_graphs(true);
    bool same = true;
    for (int rep = 0; rep < 3; ++rep) {  // (graph_cache captures a shape on its second forward) capture, then replays
      m->forward({&w, 1}, kv, lg);
      for (int32_t i = 0; i < n; ++i) {
        const auto row = lg.row(0, i);
        same = same && std::memcmp(row.data(), eager.data() + static_cast<size_t>(i) * row.size(),
                                   row.size() * sizeof(float)) == 0 && lg.argmax(0, i) == eager_ids[static_cast<size_t>(i)];
      }
    }
    if (!same) ok = false;
    ident.push_back({{"n", n}, {"bitwise_identical", same}});
  }
  r["graph_vs_eager"] = ident;
  m->set_copy_logits(false);

  // Host wall time of one forward of `w` (incl. its sync): 3 warm-up runs, then the
  // median of `iters`.
  auto forward_us = [&](const ForwardWindow& w) { return median_forward_us(*m, w, kv, iters); };
  for (const bool graphs : {false, true}) {
    if (quick && !graphs) continue;
    m->set_graphs(graphs);
    json wcost = json::array();
    double base = 0;
    for (int32_t n = 1; n <= 9; ++n) {
      if (quick && n != 1 && n != 5) continue;
      const ForwardWindow w{s, {toks.data(), static_cast<size_t>(n)}, n == 1 ? LogitsMode::last : LogitsMode::all};
      const double us = forward_us(w);
      if (n == 1) base = us;
      wcost.push_back({{"n", n}, {"us", us}, {"relative", us / base}, {"vs_floor", us / floor_us}});
    }
    r[graphs ? "graphs" : "eager"] = {{"decode_us", base}, {"decode_vs_floor", base / floor_us}, {"windows", wcost}};
  }
  // Where the time goes (graphs on): the same forward with groups of kernels left out.
  if (!quick) {
    m->set_graphs(true);
    json br = json::array();
    for (int32_t n : {1, 5}) {
      const ForwardWindow w{s, {toks.data(), static_cast<size_t>(n)}, n == 1 ? LogitsMode::last : LogitsMode::all};
      json row = {{"n", n}};
      for (const auto& [mask, label] : {std::pair<int32_t, const char*>{0, "full_us"}, {1, "gemms_only_us"},
                                        {4, "all_but_gemms_us"}, {2, "all_but_attention_us"}}) {
        m->set_timing_skip(mask);
        row[label] = forward_us(w);
      }
      m->set_timing_skip(0);
      br.push_back(row);
    }
    r["breakdown_graphs"] = br;
  }
  r["gemm"] = to_string(m->gemm());
  const double dec = r["graphs"]["decode_vs_floor"].get<double>();
  const double w5 = r["graphs"]["windows"][quick ? 1 : 4]["relative"].get<double>();
  r["goals"] = {{"decode_within_1.3x_floor", dec <= 1.3}, {"decode_vs_floor", dec},
                {"window5_within_1.15x_decode", w5 <= 1.15}, {"window5_relative", w5}};
  r["graph_count"] = m->graph_count();
  r["note"] = "host wall time per forward incl. one sync, median of iters; floor = BF16 matrix bytes of one step "
              "(layers + lm_head) / device-to-device copy rate (bytes read + written)";
  kv.release(s);
  return r;
}

}  // namespace specpipe::gpu_tool
