// The GPU checks and bench of SpecPV partial views (partial_view_check.h).
#include "tools/gpu/partial_view_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kvstore/block_summaries.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "kvstore/partial_view.h"
#include "kvstore/retrieval_index.h"
#include "model/load_model.h"
#include "model/transformer.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {
namespace {

using json = nlohmann::json;

/// Keeps every layer's query rows of the window (a copy: the pointer is the forward's).
struct KeepTap final : QueryTap {
  std::vector<std::vector<float>> rows;  // [layer][n * q_dim]
  int32_t calls = 0;
  bool all_n_ok = true;
  int32_t want_n = 0;
  int64_t q_dim = 0;
  void on_queries(int32_t layer, const float* q, int32_t n, int64_t ld) override {
    ++calls;
    all_n_ok = all_n_ok && n == want_n;
    if (rows.size() <= static_cast<size_t>(layer)) rows.resize(static_cast<size_t>(layer) + 1);
    std::vector<float>& r = rows[static_cast<size_t>(layer)];
    r.clear();
    for (int32_t i = 0; i < n; ++i) r.insert(r.end(), q + i * ld, q + i * ld + q_dim);
  }
};

/// Takes the handle of the query sums a device forward leaves on the device.
struct DeviceSumsTap final : QueryTap {
  int32_t handle = -1, host_calls = 0;
  void on_queries(int32_t, const float*, int32_t, int64_t) override { ++host_calls; }
  bool wants_device_sums() const override { return true; }
  void on_device_sums(int32_t h) override { handle = h; }
};

/// A view of `layers` layers over the sequence's `table` for a prefix of `length` tokens:
/// logical blocks `blocks(l)` (ascending, the last one the prefix's last block).
PrefixView make_view(std::span<const int32_t> table, int32_t length, int32_t B, int32_t layers,
                     const std::function<std::vector<int32_t>(int32_t)>& blocks) {
  PrefixView v;
  for (int32_t l = 0; l < layers; ++l) {
    const std::vector<int32_t> b = blocks(l);
    std::vector<int32_t> pool;
    for (int32_t x : b) pool.push_back(table[static_cast<size_t>(x)]);
    v.pool_blocks.push_back(pool);
    v.lengths.push_back(view_length(b, length, B));
  }
  return v;
}

double max_abs(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code() == ErrorCode::invalid_argument ? e.what() : std::string("wrong code: ") + e.what();
  }
  return "";
}

}  // namespace

json partial_view_check(const std::string& target_dir, const std::vector<int32_t>& prompt, int32_t context,
                        double logit_tol, double tie_tol, CudaTransformerOptions opt, bool& ok) {
  json r;
  if (static_cast<int32_t>(prompt.size()) < context + 5) throw std::runtime_error("partial view check: prompt too short");
  std::unique_ptr<Transformer> cpu = load_transformer(target_dir);
  const ModelConfig& c = cpu->config();
  const int32_t B = 16, L = c.num_layers, V = c.vocab_size;
  const int32_t blocks = (context + 5) / B + 4;
  CudaTransformer gpu(c, cpu->weights(), blocks, B, opt);
  const std::vector<int32_t> ctx(prompt.begin(), prompt.begin() + context);
  const std::vector<int32_t> window(prompt.begin() + context, prompt.begin() + context + 5);
  r["context"] = context;
  r["window"] = window.size();

  KvStoreConfig kcc = cpu->kv_config(blocks);
  kcc.prefix_cache = false;
  KvStore kvc(kcc);
  DirectKvWriter writer(kvc);
  const SeqId sc = kvc.add_sequence(ctx);
  Logits lc;
  for (size_t at = 0; at < ctx.size(); at += kPrefillChunk) {
    const auto chunk = std::span<const int32_t>(ctx).subspan(at, std::min<size_t>(kPrefillChunk, ctx.size() - at));
    kvc.reserve(sc, kvc.length(sc) + static_cast<int32_t>(chunk.size()));
    const ForwardWindow w{sc, chunk, LogitsMode::last};
    cpu->forward({&w, 1}, kvc, writer, lc);
    kvc.commit(sc, chunk);
  }
  KvStore kvg(gpu.kv_config());
  const SeqId sg = kvg.add_sequence(ctx);
  CudaLogits lg;
  gpu.set_copy_logits(true);
  gpu.set_graphs(false);
  gpu_prefill(gpu, kvg, sg, ctx, LogitsMode::last, lg);

  // The window's logits rows (nothing committed).
  auto gpu_rows = [&](const PrefixView* view, QueryTap* tap) {
    kvg.reserve(sg, context + 5);
    ForwardWindow w{sg, window, LogitsMode::all};
    w.view = view;
    w.query_tap = tap;
    gpu.forward({&w, 1}, kvg, lg);
    std::vector<float> rows;
    for (int32_t i = 0; i < 5; ++i) rows.insert(rows.end(), lg.row(0, i).begin(), lg.row(0, i).end());
    return rows;
  };
  auto cpu_rows = [&](const PrefixView* view, QueryTap* tap) {
    kvc.reserve(sc, context + 5);
    ForwardWindow w{sc, window, LogitsMode::all};
    w.view = view;
    w.query_tap = tap;
    cpu->forward({&w, 1}, kvc, writer, lc);
    kvc.truncate(sc, context);
    std::vector<float> rows;
    for (int32_t i = 0; i < 5; ++i) rows.insert(rows.end(), lc.row(0, i).begin(), lc.row(0, i).end());
    return rows;
  };

  const auto tg = kvg.block_table(sg);
  const auto tc = kvc.block_table(sc);
  const int32_t last = (context - 1) / B, full_blocks = context / B;
  std::vector<int32_t> every(static_cast<size_t>(last + 1));
  for (int32_t b = 0; b <= last; ++b) every[static_cast<size_t>(b)] = b;
  // Sink blocks 0-1, retrieved blocks that differ by layer (one more on even layers, so
  // the view lengths differ too), the last 3 blocks.
  auto strict = [&](int32_t shift) {
    return [=](int32_t l) {
      std::vector<int32_t> b{0, 1};
      const int32_t span = last - 5;
      for (int32_t k = 0; k < 2 + (l % 2 == 0 ? 1 : 0); ++k) b.push_back(2 + (shift + 7 * l + 11 * k) % span);
      for (int32_t x = last - 2; x <= last; ++x) b.push_back(x);
      std::sort(b.begin(), b.end());
      b.erase(std::unique(b.begin(), b.end()), b.end());
      return b;
    };
  };
  const PrefixView all_g = make_view(tg, context, B, L, [&](int32_t) { return every; });
  const PrefixView strict_g = make_view(tg, context, B, L, strict(0));
  const PrefixView strict_c = make_view(tc, context, B, L, strict(0));
  const PrefixView other_g = make_view(tg, context, B, L, strict(5));
  r["strict_view_tokens"] = {strict_g.lengths.front(), strict_g.lengths.back()};

  KeepTap tap_g, tap_c;
  tap_g.want_n = tap_c.want_n = 5;
  tap_g.q_dim = tap_c.q_dim = c.q_dim();
  const std::vector<float> full = gpu_rows(nullptr, nullptr);
  const std::vector<float> whole = gpu_rows(&all_g, nullptr);
  const bool whole_same = std::memcmp(full.data(), whole.data(), full.size() * sizeof(float)) == 0;
  r["whole_view_bitwise_equals_full"] = whole_same;
  if (!whole_same) ok = false;

  // The taps on both sides in the same (strict view) forward: a layer's queries depend on
  // the earlier layers' attention, so on the view.
  const std::vector<float> part_g = gpu_rows(&strict_g, &tap_g);
  const std::vector<float> part_c = cpu_rows(&strict_c, &tap_c);
  const double d = max_abs(part_g, part_c);
  int32_t ties = 0, mismatches = 0;
  for (int32_t i = 0; i < 5; ++i) {
    const std::span<const float> a(part_g.data() + int64_t{i} * V, static_cast<size_t>(V));
    const std::span<const float> b(part_c.data() + int64_t{i} * V, static_cast<size_t>(V));
    const auto ia = std::max_element(a.begin(), a.end()) - a.begin();
    const auto ib = std::max_element(b.begin(), b.end()) - b.begin();
    if (ia == ib) continue;
    if (std::abs(double{b[static_cast<size_t>(ia)]} - b[static_cast<size_t>(ib)]) < tie_tol) ++ties;
    else ++mismatches;
  }
  const double d_full = max_abs(part_g, full);
  r["strict_view_vs_cpu"] = {{"max_abs", d}, {"tolerance", logit_tol}, {"argmax_mismatches", mismatches},
                             {"near_ties", ties}};
  r["strict_view_vs_full_max_abs"] = d_full;
  if (!(d <= logit_tol) || mismatches > 0 || ties > 1 || d_full == 0) ok = false;

  // Graphs: capture + replay of one view shape, then another view of the same shape.
  const std::vector<float> other_eager = gpu_rows(&other_g, nullptr);
  gpu.set_graphs(true);
  const size_t graphs_before = gpu.graph_count();
  bool graph_same = true;
  for (int rep = 0; rep < 2; ++rep) graph_same = graph_same && gpu_rows(&strict_g, nullptr) == part_g;
  graph_same = graph_same && gpu_rows(&other_g, nullptr) == other_eager;
  r["graphed_views_equal_eager"] = graph_same;
  r["graphs_captured"] = gpu.graph_count() - graphs_before;
  if (!graph_same || gpu.graph_count() == graphs_before) ok = false;
  gpu.set_graphs(false);

  // Query taps: every layer, 5 rows each, near the CPU's.
  double q_rel = 0;
  for (int32_t l = 0; l < L && l < static_cast<int32_t>(tap_c.rows.size()) && l < static_cast<int32_t>(tap_g.rows.size()); ++l) {
    double mag = 0;
    for (float x : tap_c.rows[static_cast<size_t>(l)]) mag = std::max(mag, double{std::abs(x)});
    q_rel = std::max(q_rel, max_abs(tap_g.rows[static_cast<size_t>(l)], tap_c.rows[static_cast<size_t>(l)]) / std::max(mag, 1e-6));
  }
  r["query_tap"] = {{"calls", tap_g.calls}, {"rows_per_call_ok", tap_g.all_n_ok}, {"max_rel_vs_cpu", q_rel}};
  // BF16 activations into the GPU's GEMMs vs FP32 on the CPU: a few per mille of the
  // largest query element expected; 5% would be a wrong row or layer.
  if (tap_g.calls != L || !tap_g.all_n_ok || !(q_rel <= 0.05)) ok = false;

  // Block summaries on the device vs the pool's keys read back, and retrieval's choice.
  const std::vector<int32_t> pool_blocks(tg.begin(), tg.begin() + full_blocks);
  const size_t kvd = static_cast<size_t>(c.kv_dim());
  std::vector<float> kmax(static_cast<size_t>(L) * pool_blocks.size() * kvd), kmin(kmax.size());
  gpu.summarise_key_blocks(pool_blocks, kmax.data(), kmin.data());
  bool sum_same = true;
  BlockSummaries host({L, c.num_kv_heads, c.head_dim, B});
  std::vector<std::vector<float>> pool_k(static_cast<size_t>(L));
  std::vector<float> pv;
  for (int32_t l = 0; l < L; ++l) gpu.read_pool(l, pool_k[static_cast<size_t>(l)], pv);
  for (size_t b = 0; b < pool_blocks.size(); ++b) {
    for (int32_t l = 0; l < L; ++l)
      host.add_layer_block(l, pool_k[static_cast<size_t>(l)].data() + static_cast<size_t>(pool_blocks[b]) * B * kvd,
                           static_cast<int64_t>(kvd));
    host.finish_block();
  }
  for (int32_t l = 0; l < L; ++l)
    for (size_t b = 0; b < pool_blocks.size(); ++b) {
      const size_t at = (static_cast<size_t>(l) * pool_blocks.size() + b) * kvd;
      sum_same = sum_same && std::memcmp(kmax.data() + at, host.kmax(l, static_cast<int32_t>(b)), kvd * 4) == 0 &&
                 std::memcmp(kmin.data() + at, host.kmin(l, static_cast<int32_t>(b)), kvd * 4) == 0;
    }
  const int32_t k = 4, first = 1, lastb = full_blocks - 3;
  RetrievalIndex ig({L, c.num_kv_heads, c.head_dim, B}), ic({L, c.num_kv_heads, c.head_dim, B});
  ig.update(kvg, sg, context,
            [&](std::span<const int32_t> bl, float* mx, float* mn) { gpu.summarise_key_blocks(bl, mx, mn); });
  ic.update(kvc, sc, context);
  int32_t same_choice = 0;
  for (int32_t l = 0; l < L; ++l) {
    ig.select(sg, l, tap_g.rows[static_cast<size_t>(l)].data(), 5, c.q_dim(), c.num_heads, k, first, lastb);
    ic.select(sc, l, tap_c.rows[static_cast<size_t>(l)].data(), 5, c.q_dim(), c.num_heads, k, first, lastb);
    const auto a = ig.retrieved(sg, l), b = ic.retrieved(sc, l);
    for (int32_t x : a) same_choice += std::count(b.begin(), b.end(), x) > 0 ? 1 : 0;
  }
  r["summaries"] = {{"blocks", pool_blocks.size()},
                    {"device_equals_pool_keys_bitwise", sum_same},
                    {"bytes_to_host", 2 * kmax.size() * 4},
                    {"key_bytes_they_summarise", kmax.size() * 4 * B},
                    {"retrieved_blocks_same_as_cpu", same_choice},
                    {"retrieved_blocks", k * L}};
  if (!sum_same || ig.summarised_blocks(sg) != full_blocks) ok = false;
  // Retrieval on the device (DeviceRetrieval, what the engine's retrieval actor uses with
  // a CUDA target): the same strict-view forward again, its query sums left on the
  // device, the summaries kept there, scored and ranked there - the same blocks as the
  // host way above (ig: this GPU's query rows summed and scored on the host), every layer.
  DeviceSumsTap sums_tap;
  const bool rerun_same = gpu_rows(&strict_g, &sums_tap) == part_g;
  RetrievalIndex id({L, c.num_kv_heads, c.head_dim, B}, gpu.device_retrieval());
  id.update_on_device(kvg, sg, context);
  id.select_on_device(sg, sums_tap.handle, k, first, lastb);
  int32_t device_same_layers = 0;
  for (int32_t l = 0; l < L; ++l) {
    const auto a = id.retrieved(sg, l), b = ig.retrieved(sg, l);
    device_same_layers += std::equal(a.begin(), a.end(), b.begin(), b.end()) && !a.empty() ? 1 : 0;
  }
  r["device_retrieval"] = {{"layers_same_as_host_way", device_same_layers},
                           {"layers", L},
                           {"summarised_blocks", id.summarised_blocks(sg)},
                           {"sums_handle", sums_tap.handle},
                           {"host_query_calls", sums_tap.host_calls},
                           {"logits_same_as_host_tapped", rerun_same}};
  if (device_same_layers != L || !rerun_same || sums_tap.handle < 0 || sums_tap.host_calls != 0 ||
      id.summarised_blocks(sg) != full_blocks)
    ok = false;

  // Bad views: one error each, then the model serves as before.
  json errors;
  PrefixView bad = strict_g;
  bad.lengths.pop_back();
  errors["layers"] = error_of([&] { gpu_rows(&bad, nullptr); });
  bad = strict_g;
  bad.lengths[0] += B;
  errors["length_vs_blocks"] = error_of([&] { gpu_rows(&bad, nullptr); });
  bad = strict_g;
  bad.pool_blocks[1][0] = blocks + 7;
  errors["block_outside_pool"] = error_of([&] { gpu_rows(&bad, nullptr); });
  bad = all_g;
  bad.pool_blocks[0].push_back(tg[0]);
  bad.lengths[0] = context + B;
  errors["longer_than_prefix"] = error_of([&] { gpu_rows(&bad, nullptr); });
  for (const auto& [key, e] : errors.items())
    if (e.get<std::string>().find("partial view") == std::string::npos) ok = false;
  const bool serves = gpu_rows(nullptr, nullptr) == full;
  errors["serves_after"] = serves;
  if (!serves) ok = false;
  r["errors"] = errors;
  r["pass"] = ok;
  return r;
}

json view_bench(const std::string& shape, int32_t context, const std::vector<int32_t>& budgets, uint64_t seed,
                int iters, CudaTransformerOptions opt, bool& ok) {
  json r;
  ModelConfig c = synthetic_model_config(shape);
  if (context + 16 > c.max_position_embeddings) {
    c.max_position_embeddings = context + 16;
    r["positions_raised_to"] = c.max_position_embeddings;
  }
  r["model"] = shape;
  r["context"] = context;
  const int32_t B = 16;
  const int32_t blocks = (context + 5 + B - 1) / B + 2;
  opt.copy_logits = false;
  std::unique_ptr<CudaTransformer> m = CudaTransformer::random(c, seed, blocks, B, opt);
  r["device_bytes"] = m->device_bytes();
  r["kv_dtype"] = std::string(dtype_name(opt.kv_dtype));
  r["kv_bytes_full"] = static_cast<double>(context) * c.num_layers * 2.0 * c.kv_dim() *
                       static_cast<double>(dtype_size(opt.kv_dtype));
  KvStore kv(m->kv_config());
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> tok(0, c.vocab_size - 1);
  std::vector<int32_t> prompt;
  const SeqId s = book_random_context(kv, c.vocab_size, context, 5, rng, prompt);
  std::vector<int32_t> toks(5);
  for (auto& t : toks) t = tok(rng);
  m->set_graphs(true);
  auto forward_us = [&](const PrefixView* view) {
    ForwardWindow w{s, toks, LogitsMode::all};
    w.view = view;
    return median_forward_us(*m, w, kv, iters);
  };
  const double full_us = forward_us(nullptr);
  m->set_timing_skip(2);  // attention left out: the weights' part
  const double no_attention_us = forward_us(nullptr);
  m->set_timing_skip(0);
  r["full_us"] = full_us;
  r["no_attention_us"] = no_attention_us;
  const auto table = kv.block_table(s);
  const int32_t last = (context - 1) / B;
  json parts = json::array();
  for (int32_t budget : budgets) {
    // Sink 1/16, retrieval 1/2 spread over the middle, recent 7/16 (window + buffer).
    const int32_t nb = std::max(3, budget / B);
    const int32_t sink = std::max(1, nb / 16), recent = std::max(1, nb * 7 / 16), ret = nb - sink - recent;
    std::vector<int32_t> b;
    for (int32_t x = 0; x < sink; ++x) b.push_back(x);
    const int32_t mid_first = sink, mid_last = last - recent;  // [mid_first, mid_last]
    for (int32_t k = 0; k < ret && mid_last >= mid_first; ++k)
      b.push_back(mid_first + static_cast<int32_t>(int64_t{k} * (mid_last - mid_first + 1) / std::max(ret, 1)));
    for (int32_t x = last - recent + 1; x <= last; ++x) b.push_back(x);
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    if (static_cast<int32_t>(b.size()) * B >= context) {
      parts.push_back({{"budget", budget}, {"skipped", "budget covers the context"}});
      continue;
    }
    PrefixView v;
    std::vector<int32_t> pool;
    for (int32_t x : b) pool.push_back(table[static_cast<size_t>(x)]);
    v.pool_blocks.assign(static_cast<size_t>(c.num_layers), pool);
    v.lengths.assign(static_cast<size_t>(c.num_layers), view_length(b, context, B));
    const double us = forward_us(&v);
    parts.push_back({{"budget", budget},
                     {"view_tokens", v.lengths.front()},
                     {"partial_us", us},
                     {"vs_full", us / full_us}});
  }
  r["partial"] = parts;
  r["graph_count"] = m->graph_count();
  r["note"] = "5-token verify window, graphs on, host wall time per forward incl. one sync, median of iters; context "
              "booked (K/V values as allocated); no_attention_us: the same window with the attention kernels left "
              "out (timing_skip 2)";
  kv.release(s);
  (void)ok;
  return r;
}

}  // namespace specpipe::gpu_tool
