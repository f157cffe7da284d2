// Quest scores on the device vs the CPU's (quest_scores_check.h).
#include "tools/gpu/quest_scores_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <random>
#include <vector>

#include "kvstore/block_summaries.h"
#include "model/cuda/key_summaries.h"
#include "tools/gpu/check_support.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

using json = nlohmann::json;
using gpu_check::DeviceBuffer;

json quest_scores_check(const std::string& shape, int32_t context, int32_t rows, uint64_t seed, int iters, bool& ok) {
  const ModelConfig c = synthetic_model_config(shape);
  const int32_t B = 16, L = c.num_layers, kvd = static_cast<int32_t>(c.kv_dim()), qd = static_cast<int32_t>(c.q_dim());
  const int32_t blocks = context / B;
  const SummaryShape s{L, c.num_kv_heads, c.head_dim, B};
  json r = {{"model", shape}, {"context", context}, {"blocks", blocks}, {"query_rows", rows}, {"layers", L},
            {"device", device_name()}};
  // Summaries [L][blocks][kvd] and queries [L][rows][qd], as keys and queries look: about
  // unit scale, Kmax >= Kmin.
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t per_layer = static_cast<size_t>(blocks) * kvd;
  std::vector<float> kmax(per_layer * L), kmin(per_layer * L), q(static_cast<size_t>(L) * rows * qd);
  for (size_t i = 0; i < kmax.size(); ++i) {
    kmin[i] = normal(rng);
    kmax[i] = kmin[i] + std::abs(normal(rng));
  }
  for (float& x : q) x = normal(rng);
  BlockSummaries host(s);
  for (int32_t b = 0; b < blocks; ++b) {
    for (int32_t l = 0; l < L; ++l) {
      const size_t at = l * per_layer + static_cast<size_t>(b) * kvd;
      host.add_layer_summary(l, kmax.data() + at, kmin.data() + at);
    }
    host.finish_block();
  }

  // The host path: every layer's query rows to the host, summed, scored and ranked there
  // (the top blocks of a 2K-token budget after a one-block sink).
  const int32_t k = std::min(2048 / B, blocks - 1);
  std::vector<std::vector<int32_t>> cpu_top(static_cast<size_t>(L));
  DeviceBuffer<float> dq(q), dmax(kmax), dmin(kmin);
  std::vector<float> q_back(q.size()), cpu_scores(static_cast<size_t>(L) * blocks);
  std::vector<QuerySums> cpu_sums(static_cast<size_t>(L));
  std::vector<double> host_ms, copy_ms;
  for (int it = 0; it < iters; ++it) {
    const Clock::time_point t0 = Clock::now();
    cuda_check(cudaMemcpy(q_back.data(), dq.get(), q.size() * sizeof(float), cudaMemcpyDeviceToHost), "queries to host");
    copy_ms.push_back(ms_since(t0));
    for (int32_t l = 0; l < L; ++l) {
      cpu_sums[static_cast<size_t>(l)] =
          QuerySums::of(s, q_back.data() + static_cast<size_t>(l) * rows * qd, rows, qd, c.num_heads);
      const std::span<float> scores_l =
          std::span<float>(cpu_scores).subspan(static_cast<size_t>(l) * blocks, static_cast<size_t>(blocks));
      host.score(l, cpu_sums[static_cast<size_t>(l)], scores_l);
      cpu_top[static_cast<size_t>(l)] = top_blocks(scores_l, k, 1);
    }
    host_ms.push_back(ms_since(t0));
  }

  // The device path: sums, scores and top blocks of every layer, then the blocks to the host.
  DeviceBuffer<double> pos(static_cast<size_t>(L) * kvd), neg(static_cast<size_t>(L) * kvd);
  DeviceBuffer<float> dscores(static_cast<size_t>(L) * blocks);
  DeviceBuffer<int32_t> dtop(static_cast<size_t>(L) * k);
  std::vector<int32_t> gpu_top(dtop.size());
  auto enqueue = [&] {
    cuda_check(cuda::quest_query_sums(dq.get(), int64_t{rows} * qd, rows, qd, c.num_heads, c.num_kv_heads, c.head_dim, L,
                                      pos.get(), neg.get(), nullptr),
               "quest_query_sums");
    cuda_check(cuda::quest_block_scores(dmax.get(), dmin.get(), static_cast<int64_t>(per_layer), blocks, kvd, L, pos.get(),
                                        neg.get(), dscores.get(), nullptr),
               "quest_block_scores");
    cuda_check(cuda::quest_top_blocks(dscores.get(), blocks, 1, blocks, k, L, dtop.get(), nullptr), "quest_top_blocks");
  };
  std::vector<double> kernel_ms, device_ms;
  enqueue();  // warm-up
  cuda_check(cudaDeviceSynchronize(), "warm-up");
  for (int it = 0; it < iters; ++it) {
    kernel_ms.push_back(stream_ms(enqueue));
    const Clock::time_point t0 = Clock::now();
    enqueue();
    cuda_check(cudaMemcpy(gpu_top.data(), dtop.get(), gpu_top.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
               "top blocks to host");
    device_ms.push_back(ms_since(t0));
  }

  // Bits: the sums, the scores, and so each layer's top blocks (a 2K-token budget).
  const std::vector<double> gp = pos.download(), gn = neg.download();
  const std::vector<float> gpu_scores = dscores.download();
  int64_t sum_diffs = 0, score_diffs = 0;
  int32_t top_diffs = 0, kernel_top_diffs = 0;
  for (int32_t l = 0; l < L; ++l) {
    const QuerySums& cs = cpu_sums[static_cast<size_t>(l)];
    for (int32_t e = 0; e < kvd; ++e) {
      const size_t at = static_cast<size_t>(l) * kvd + e;
      sum_diffs += std::memcmp(&gp[at], &cs.pos[static_cast<size_t>(e)], 8) != 0 ? 1 : 0;
      sum_diffs += std::memcmp(&gn[at], &cs.neg[static_cast<size_t>(e)], 8) != 0 ? 1 : 0;
    }
    const std::span<const float> cl(cpu_scores.data() + static_cast<size_t>(l) * blocks, static_cast<size_t>(blocks));
    const std::span<const float> gl(gpu_scores.data() + static_cast<size_t>(l) * blocks, static_cast<size_t>(blocks));
    for (int32_t b = 0; b < blocks; ++b) score_diffs += std::memcmp(&cl[static_cast<size_t>(b)], &gl[static_cast<size_t>(b)], 4) != 0 ? 1 : 0;
    top_diffs += top_blocks(cl, k, 1) != top_blocks(gl, k, 1) ? 1 : 0;
    const auto kernel_top = std::span<const int32_t>(gpu_top).subspan(static_cast<size_t>(l) * k, static_cast<size_t>(k));
    kernel_top_diffs += std::vector<int32_t>(kernel_top.begin(), kernel_top.end()) != cpu_top[static_cast<size_t>(l)] ? 1 : 0;
  }
  // Ties: the same scores and sums twice in every layer's first and last blocks, for the
  // kernel's tie rule (the earlier block) and -0 == +0.
  int32_t tie_diffs = 0;
  {
    std::vector<float> tied(static_cast<size_t>(blocks), 1.0f);
    for (int32_t b = 0; b < blocks; b += 3) tied[static_cast<size_t>(b)] = 2.0f;
    tied[1] = 0.0f;
    tied[static_cast<size_t>(blocks - 1)] = -0.0f;
    DeviceBuffer<float> dt(tied);
    for (int32_t kk : {1, 2, k, blocks - 2}) {  // blocks - 2: all but one of the two zeros
      DeviceBuffer<int32_t> dk(static_cast<size_t>(kk));
      cuda_check(cuda::quest_top_blocks(dt.get(), blocks, 1, blocks, kk, 1, dk.get(), nullptr), "quest_top_blocks (ties)");
      tie_diffs += dk.download() != top_blocks(tied, kk, 1) ? 1 : 0;
    }
  }
  if (sum_diffs != 0 || score_diffs != 0 || top_diffs != 0 || kernel_top_diffs != 0 || tie_diffs != 0) ok = false;
  r["bitwise"] = {{"query_sums_differing", sum_diffs},
                  {"scores_differing", score_diffs},
                  {"layers_with_other_top_blocks", top_diffs},
                  {"layers_with_other_device_top_blocks", kernel_top_diffs},
                  {"tie_cases_differing", tie_diffs},
                  {"top_k", k}};
  r["host_path_ms"] = median(host_ms);
  r["host_path_query_copy_ms"] = median(copy_ms);
  r["device_kernels_ms"] = median(kernel_ms);
  r["device_path_ms"] = median(device_ms);
  r["host_over_device"] = median(host_ms) / median(device_ms);
  r["bytes_to_host"] = {{"host_path_queries", q.size() * sizeof(float)}, {"device_path_top_blocks", gpu_top.size() * sizeof(int32_t)}};
  r["summary_bytes_read"] = 2 * kmax.size() * sizeof(float);
  return r;
}

}  // namespace specpipe::gpu_tool
