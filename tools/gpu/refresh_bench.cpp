// A SpecPV refresh round, host way vs device way (refresh_bench.h).
#include "tools/gpu/refresh_bench.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "kvstore/block_summaries.h"
#include "kvstore/kv_store.h"
#include "kvstore/retrieval_index.h"
#include "tools/gpu/check_support.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

/// The verifier's tap, either way: QuerySums of every layer on the host, or the handle of
/// the sums the forward left on the device.
struct RefreshTap final : QueryTap {
  RefreshTap(SummaryShape s, int32_t h, bool on_device) : shape(s), heads(h), device(on_device) {}
  void on_queries(int32_t layer, const float* q, int32_t n, int64_t ld) override {
    sums.resize(static_cast<size_t>(shape.num_layers));
    sums[static_cast<size_t>(layer)] = QuerySums::of(shape, q, n, ld, heads);
  }
  bool wants_device_sums() const override { return device; }
  void on_device_sums(int32_t h) override { handle = h; }
  SummaryShape shape;
  int32_t heads;
  bool device;
  std::vector<QuerySums> sums;
  int32_t handle = -1;
};

}  // namespace

json refresh_bench(const std::string& shape, int32_t context, int32_t rows, int32_t k, uint64_t seed, int iters,
                   CudaTransformerOptions opt, bool& ok) {
  json r;
  ModelConfig c = synthetic_model_config(shape);
  c.max_position_embeddings = std::max(c.max_position_embeddings, context + rows + 16);
  const int32_t B = 16, L = c.num_layers;
  const int64_t kvd = c.kv_dim();
  opt.copy_logits = false;
  opt.max_tokens = std::max(opt.max_tokens, rows);
  const int32_t pool_blocks = (context + rows + B - 1) / B + 2;
  std::unique_ptr<CudaTransformer> m = CudaTransformer::random(c, seed, pool_blocks, B, opt);
  m->set_graphs(false);  // tapped forwards run eagerly: the untapped one too, for the same baseline
  KvStore kv(m->kv_config());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> tok(0, c.vocab_size - 1);
  std::vector<int32_t> prompt;
  const SeqId s = book_random_context(kv, c.vocab_size, context, rows, rng, prompt);
  // Random keys (a cheap hash, uniform in [-1, 1)), each layer reading them rotated so
  // its blocks differ; the values are the keys (unread here).
  {
    std::vector<float> keys(static_cast<size_t>(int64_t{context} * kvd));
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (float& f : keys) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      f = static_cast<float>(static_cast<int64_t>(x >> 40) - (int64_t{1} << 23)) / static_cast<float>(1 << 23);
    }
    gpu_check::DeviceBuffer<float> dk(keys);
    std::vector<int64_t> slots(static_cast<size_t>(context));
    for (int32_t l = 0; l < L; ++l) {
      for (int32_t p = 0; p < context; ++p)
        slots[static_cast<size_t>(p)] = kv.slot(s, static_cast<int32_t>((p + int64_t{l} * 977) % context));
      m->write_slots(l, dk.get(), dk.get(), slots.data(), context);
    }
    cuda_check(cudaDeviceSynchronize(), "keys written");
  }
  std::vector<int32_t> toks(static_cast<size_t>(rows));
  for (auto& t : toks) t = tok(rng);
  const SummaryShape ss{L, c.num_kv_heads, c.head_dim, B};
  const int32_t full = context / B, first = 1, last = full - 8;
  CudaLogits out;
  auto forward = [&](QueryTap* tap) {
    ForwardWindow w{s, toks, LogitsMode::last};
    w.query_tap = tap;
    m->forward({&w, 1}, kv, out);
  };
  RetrievalIndex host(ss), device(ss, m->device_retrieval());
  const KeySummariser summarise = [&](std::span<const int32_t> b, float* mx, float* mn) {
    m->summarise_key_blocks(b, mx, mn);
  };
  // One refresh either way: the tapped forward, the summaries brought up to date, every
  // layer's selection.
  auto refresh_host = [&] {
    RefreshTap tap(ss, c.num_heads, false);
    forward(&tap);
    host.update(kv, s, context, summarise);
    for (int32_t l = 0; l < L; ++l) host.select(s, l, tap.sums.at(static_cast<size_t>(l)), k, first, last);
  };
  auto refresh_device = [&] {
    RefreshTap tap(ss, c.num_heads, true);
    forward(&tap);
    device.update_on_device(kv, s, context);
    device.select_on_device(s, tap.handle, k, first, last);
  };
  auto timed = [](const std::function<void()>& f) {
    const Clock::time_point t0 = Clock::now();
    f();
    return ms_since(t0);
  };
  for (int i = 0; i < 3; ++i) forward(nullptr);  // warm-up
  const double first_host = timed(refresh_host), first_device = timed(refresh_device);
  int32_t differing = 0;
  for (int32_t l = 0; l < L; ++l) {
    const auto a = host.retrieved(s, l), b = device.retrieved(s, l);
    differing += std::vector<int32_t>(a.begin(), a.end()) != std::vector<int32_t>(b.begin(), b.end()) ? 1 : 0;
  }
  std::vector<double> plain_ms, host_ms, device_ms;
  for (int i = 0; i < iters; ++i) {
    plain_ms.push_back(timed([&] { forward(nullptr); }));
    host_ms.push_back(timed(refresh_host));
    device_ms.push_back(timed(refresh_device));
  }
  for (int32_t l = 0; l < L; ++l) {
    const auto a = host.retrieved(s, l), b = device.retrieved(s, l);
    differing += std::vector<int32_t>(a.begin(), a.end()) != std::vector<int32_t>(b.begin(), b.end()) ? 1 : 0;
  }
  if (differing != 0 || host.retrieved(s, 0).size() != static_cast<size_t>(std::min(k, last - first))) ok = false;
  r["model"] = shape;
  r["context"] = context;
  r["window_rows"] = rows;
  r["blocks"] = full;
  r["top_k"] = k;
  r["device"] = device_name();
  r["layers_choosing_differently"] = differing;
  r["untapped_forward_ms"] = median(plain_ms);
  r["first_refresh_ms"] = {{"host", first_host}, {"device", first_device}};
  r["refresh_ms"] = {{"host", median(host_ms)}, {"device", median(device_ms)}};
  r["retrieval_ms"] = {{"host", median(host_ms) - median(plain_ms)}, {"device", median(device_ms) - median(plain_ms)}};
  r["bytes_to_host_per_refresh"] = {{"host_queries", int64_t{rows} * L * c.q_dim() * 4},
                                    {"device_chosen_blocks", int64_t{L} * std::min(k, last - first) * 4}};
  r["note"] = "host wall time; a refresh = the tapped window forward (eager) + retrieval; retrieval_ms = refresh - "
              "the untapped forward (medians); the first refresh also summarises every block (host way: copied "
              "back); keys random, every layer its own";
  kv.release(s);
  return r;
}

}  // namespace specpipe::gpu_tool
