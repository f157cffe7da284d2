// Sampling kernels (kernels/cuda/sampling.h) against the CPU path: the temperature
// softmax against cpu::sampling_distribution, per-row draws against cpu::sample_from, and
// the rejection-sampling verdict against accept_sampling (pipeline/acceptance.h), the one
// the engine runs, fed the same RNG draws. Sums differ from the CPU's in the last bits, so
// a draw may move where a uniform lands within rounding of a boundary of the cumulative
// distribution: the draws must agree except for at most one in a thousand.
#include <cmath>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "kernels/cuda/sampling.h"
#include "pipeline/acceptance.h"
#include "pipeline/rng.h"
#include "tools/gpu/check_support.h"

namespace specpipe::gpu_check {
namespace {

/// Logits with a realistic spread (a few strong candidates over a long tail).
std::vector<float> peaky_logits(size_t rows, int32_t vocab, uint32_t seed) {
  std::vector<float> l = random_floats(rows * static_cast<size_t>(vocab), seed, -4.0f, 4.0f);
  std::mt19937 rng(seed + 1);
  for (size_t r = 0; r < rows; ++r)
    for (int k = 0; k < 4; ++k) l[r * static_cast<size_t>(vocab) + rng() % static_cast<uint32_t>(vocab)] += 8.0f;
  return l;
}

bool check_draws(Report& report, const std::string& name, int64_t mismatches, int64_t draws) {
  const bool pass = mismatches * 1000 <= draws;
  if (!pass) report.fail(name, std::to_string(mismatches) + " of " + std::to_string(draws) + " draws differ");
  else report.exact_count(name, 0, std::to_string(mismatches) + " of " + std::to_string(draws) +
                                       " draws moved by rounding (allowed: 1 in 1000)");
  return pass;
}

void check_softmax_and_draws(Report& report, cudaStream_t stream, int32_t vocab, float temperature) {
  const int32_t rows = 64;
  const std::string shape = " vocab " + std::to_string(vocab) + " T " + std::to_string(temperature).substr(0, 3);
  const auto logits = peaky_logits(rows, vocab, 11u + static_cast<uint32_t>(vocab));
  DeviceBuffer<float> dl(logits), dp(logits.size());
  CUDA_OK(cuda::softmax_temperature(dl.get(), vocab, rows, vocab, temperature, dp.get(), vocab, stream));
  CUDA_OK(cudaStreamSynchronize(stream));
  std::vector<float> ref(logits.size()), row;
  const cpu::SamplingParams params{temperature, 0, 1.0f};
  for (int32_t r = 0; r < rows; ++r) {
    cpu::sampling_distribution(std::span<const float>(logits.data() + r * vocab, static_cast<size_t>(vocab)), params,
                               row);
    std::copy(row.begin(), row.end(), ref.begin() + r * vocab);
  }
  report.compare("softmax_temperature" + shape, dp.download(), ref, 1e-5);

  // Many draws per row: each row with a fresh uniform.
  const int32_t trials = 64;
  Rng rng(7);
  std::vector<double> u(static_cast<size_t>(rows));
  DeviceBuffer<double> du(u.size());
  DeviceBuffer<int32_t> dout(static_cast<size_t>(rows));
  int64_t mismatches = 0;
  for (int32_t t = 0; t < trials; ++t) {
    for (double& x : u) x = rng.uniform();
    du.upload(u);
    CUDA_OK(cuda::sample_rows(dl.get(), vocab, rows, vocab, temperature, du.get(), dout.get(), stream));
    const auto got = dout.download();
    for (int32_t r = 0; r < rows; ++r)
      mismatches += got[static_cast<size_t>(r)] !=
                    cpu::sample_from(std::span<const float>(ref.data() + r * vocab, static_cast<size_t>(vocab)),
                                     u[static_cast<size_t>(r)]);
  }
  check_draws(report, "sample_rows" + shape, mismatches, int64_t{rows} * trials);
}

/// A sampled draft chain's step (sample_chain_rows): rows at temperature 0 (every third)
/// keep their id and q untouched; the others against cpu::sampling_distribution (q within
/// 1e-6 relative, element by element, below 1e-20 absolute) and cpu::sample_from.
void check_chain_rows(Report& report, cudaStream_t stream, int32_t vocab, float temperature) {
  const int32_t rows = 48;
  const auto V = static_cast<size_t>(vocab);
  const std::string shape = " vocab " + std::to_string(vocab) + " T " + std::to_string(temperature).substr(0, 3);
  const auto logits = peaky_logits(rows, vocab, 31u + static_cast<uint32_t>(vocab));
  std::vector<float> inv_t(static_cast<size_t>(rows));
  for (int32_t r = 0; r < rows; ++r) inv_t[static_cast<size_t>(r)] = r % 3 == 2 ? 0.0f : 1.0f / temperature;
  DeviceBuffer<float> dl(logits), dt(inv_t);
  DeviceBuffer<double> du(static_cast<size_t>(rows));
  DeviceBuffer<float> dq(logits.size());
  DeviceBuffer<int32_t> dids(static_cast<size_t>(rows));
  std::vector<float> ref(logits.size()), row;
  const cpu::SamplingParams params{temperature, 0, 1.0f};
  for (int32_t r = 0; r < rows; ++r) {
    cpu::sampling_distribution(std::span<const float>(logits.data() + r * V, V), params, row);
    std::copy(row.begin(), row.end(), ref.begin() + r * static_cast<std::ptrdiff_t>(V));
  }
  Rng rng(9);
  std::vector<double> u(static_cast<size_t>(rows));
  const std::vector<float> sentinel_q(logits.size(), -1.0f);
  const std::vector<int32_t> sentinel_ids(static_cast<size_t>(rows), -7);
  int64_t mismatches = 0, draws = 0, greedy_touched = 0;
  double worst = 0;
  for (int32_t t = 0; t < 16; ++t) {
    for (double& x : u) x = rng.uniform();
    du.upload(u);
    dq.upload(sentinel_q);
    dids.upload(sentinel_ids);
    CUDA_OK(cuda::sample_chain_rows(dl.get(), vocab, rows, vocab, dt.get(), du.get(), dq.get(), vocab, dids.get(),
                                    stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto ids = dids.download();
    const auto q = dq.download();
    for (int32_t r = 0; r < rows; ++r) {
      const auto ur = static_cast<size_t>(r);
      const std::span<const float> rq(ref.data() + ur * V, V);
      if (r % 3 == 2) {
        greedy_touched += ids[ur] != -7 || q[ur * V] != -1.0f || q[ur * V + V - 1] != -1.0f;
        continue;
      }
      ++draws;
      mismatches += ids[ur] != cpu::sample_from(rq, u[ur]);
      for (size_t i = 0; i < V; ++i)
        worst = std::max(worst, std::abs(double{q[ur * V + i]} - double{rq[i]}) / std::max(std::abs(double{rq[i]}), 1e-20));
    }
  }
  check_draws(report, "sample_chain_rows" + shape, mismatches, draws);
  report.exact_count("sample_chain_rows greedy rows untouched" + shape, greedy_touched);
  if (worst > 1e-6) report.fail("sample_chain_rows q" + shape, "worst relative difference " + std::to_string(worst));
  else report.exact_count("sample_chain_rows q" + shape, 0, "worst relative difference " + std::to_string(worst));
}

/// Windows of 1..8 drafts, half with draft distributions and half greedy (point masses);
/// drafts drawn from q where there is one, so acceptance is neither always nor never.
void check_rejection(Report& report, cudaStream_t stream, int32_t vocab, float temperature) {
  const std::string shape = " vocab " + std::to_string(vocab) + " T " + std::to_string(temperature).substr(0, 3);
  const cpu::SamplingParams params{temperature, 0, 1.0f};
  std::vector<cuda::RejectionWindow> windows;
  std::vector<int32_t> drafts;
  int32_t p_rows = 0, q_rows = 0, u_count = 0;
  for (int32_t w = 0; w < 32; ++w) {
    const int32_t n = 1 + w % 8;
    const bool with_q = w % 2 == 0;
    windows.push_back({p_rows, with_q ? q_rows : -1, n, static_cast<int32_t>(drafts.size()), u_count});
    p_rows += n + 1;
    if (with_q) q_rows += n;
    u_count += n + 1;
    drafts.resize(drafts.size() + static_cast<size_t>(n));
  }
  // Target logits; draft logits = target logits plus noise (a draft that mostly agrees).
  const auto p_logits = peaky_logits(static_cast<size_t>(p_rows), vocab, 21u + static_cast<uint32_t>(vocab));
  const auto noise = random_floats(static_cast<size_t>(q_rows) * static_cast<size_t>(vocab), 23u, -1.5f, 1.5f);
  std::vector<float> q(static_cast<size_t>(q_rows) * static_cast<size_t>(vocab));
  std::vector<float> row, dist;
  Rng draft_rng(5);
  for (const cuda::RejectionWindow& w : windows)
    for (int32_t i = 0; i < w.drafts; ++i) {
      const float* p = p_logits.data() + static_cast<size_t>(w.p_row + i) * static_cast<size_t>(vocab);
      int32_t d = 0;
      if (w.q_row >= 0) {
        row.assign(p, p + vocab);
        const size_t at = static_cast<size_t>(w.q_row + i) * static_cast<size_t>(vocab);
        for (int32_t t = 0; t < vocab; ++t) row[static_cast<size_t>(t)] += noise[at + static_cast<size_t>(t)];
        cpu::sampling_distribution(row, params, dist);
        std::copy(dist.begin(), dist.end(), q.begin() + static_cast<std::ptrdiff_t>(at));
        d = cpu::sample_from(dist, draft_rng.uniform());
      } else {
        d = cpu::argmax(std::span<const float>(p, static_cast<size_t>(vocab)));
        if (i % 3 == 2) d = (d + 1) % vocab;  // a greedy draft the target disagrees with
      }
      drafts[static_cast<size_t>(w.draft_at + i)] = d;
    }
  DeviceBuffer<float> dl(p_logits), dq(q.empty() ? std::vector<float>(1) : q);
  DeviceBuffer<int32_t> dd(drafts), dacc(windows.size()), dnext(windows.size());
  DeviceBuffer<double> du(static_cast<size_t>(u_count));
  DeviceBuffer<cuda::RejectionWindow> dw(windows.size());
  CUDA_OK(cudaMemcpy(dw.get(), windows.data(), windows.size() * sizeof(cuda::RejectionWindow), cudaMemcpyHostToDevice));

  const int32_t trials = 32;
  int64_t mismatches = 0, verdicts = 0, accepted_total = 0, proposed_total = 0;
  Rng rng(99);
  std::vector<double> u(static_cast<size_t>(u_count));
  for (int32_t t = 0; t < trials; ++t) {
    // Each window's request RNG: the GPU gets its next n + 1 draws, the CPU the RNG.
    std::vector<Rng> request_rngs;
    for (const cuda::RejectionWindow& w : windows) {
      request_rngs.push_back(rng);
      Rng copy = rng;
      for (int32_t i = 0; i <= w.drafts; ++i) u[static_cast<size_t>(w.u_at + i)] = copy.uniform();
      rng.next();
    }
    du.upload(u);
    CUDA_OK(cuda::rejection_sample(dl.get(), vocab, dq.get(), vocab, dd.get(), du.get(), dw.get(),
                                   static_cast<int32_t>(windows.size()), vocab, temperature, dacc.get(), dnext.get(),
                                   stream));
    const auto acc = dacc.download(), next = dnext.download();
    for (size_t wi = 0; wi < windows.size(); ++wi) {
      const cuda::RejectionWindow& w = windows[wi];
      std::vector<std::vector<float>> qrows(static_cast<size_t>(w.drafts));
      if (w.q_row >= 0)
        for (int32_t i = 0; i < w.drafts; ++i) {
          const auto* src = q.data() + static_cast<size_t>(w.q_row + i) * static_cast<size_t>(vocab);
          qrows[static_cast<size_t>(i)].assign(src, src + vocab);
        }
      const std::span<const int32_t> ds(drafts.data() + w.draft_at, static_cast<size_t>(w.drafts));
      auto target_row = [&](int32_t i) {
        return std::span<const float>(p_logits.data() + static_cast<size_t>(w.p_row + i) * static_cast<size_t>(vocab),
                                      static_cast<size_t>(vocab));
      };
      const Verdict v = accept_sampling(ds, target_row, qrows, params, request_rngs[wi]);
      mismatches += v.accepted != acc[wi] || v.next_token != next[wi];
      ++verdicts;
      accepted_total += v.accepted;
      proposed_total += w.drafts;
    }
  }
  check_draws(report, "rejection_sample" + shape, mismatches, verdicts);
  report.info("rejection_sample acceptance" + shape,
              static_cast<double>(accepted_total) / static_cast<double>(proposed_total));
}

}  // namespace

void check_sampling(Report& report, cudaStream_t stream, const Options& options) {
  for (const int32_t vocab : {8192, 151936})
    for (const float temperature : {0.7f, 1.0f}) {
      check_softmax_and_draws(report, stream, vocab, temperature);
      check_rejection(report, stream, vocab, temperature);
      check_chain_rows(report, stream, vocab, temperature);
    }
  if (options.timing) {
    const int32_t vocab = 151936, rows = 9;
    const auto logits = peaky_logits(rows, vocab, 3);
    DeviceBuffer<float> dl(logits);
    const std::vector<cuda::RejectionWindow> one{{0, -1, rows - 1, 0, 0}};
    DeviceBuffer<cuda::RejectionWindow> dw(1);
    CUDA_OK(cudaMemcpy(dw.get(), one.data(), sizeof(cuda::RejectionWindow), cudaMemcpyHostToDevice));
    DeviceBuffer<int32_t> dd(std::vector<int32_t>(rows - 1, 1)), dacc(1), dnext(1);
    DeviceBuffer<double> du(std::vector<double>(rows, 0.0));  // u = 0: every draft accepted, the longest path
    const double us = time_us(stream, 10, 100, [&] {
      cuda::rejection_sample(dl.get(), vocab, nullptr, vocab, dd.get(), du.get(), dw.get(), 1, vocab, 1.0f, dacc.get(),
                             dnext.get(), stream);
    });
    report.timing({{"name", "rejection_sample 8 drafts vocab 151936 (all accepted)"}, {"us", us}});
    // A sampled draft chain's draw alone at the demo vocabulary (one row, as at one client),
    // and a verify window of 4 drafts there (all accepted: the longest path).
    for (const int32_t v : {8192, 151936}) {
      const auto row = peaky_logits(5, v, 5);
      DeviceBuffer<float> drow(row), dq(static_cast<size_t>(v)), dt(std::vector<float>{1.0f / 0.8f});
      DeviceBuffer<double> du1(std::vector<double>{0.5}), du5(std::vector<double>(5, 0.0));
      DeviceBuffer<int32_t> dids(1), dd4(std::vector<int32_t>(4, 1));
      const double chain_us = time_us(stream, 10, 200, [&] {
        cuda::sample_chain_rows(drow.get(), v, 1, v, dt.get(), du1.get(), dq.get(), v, dids.get(), stream);
      });
      report.timing({{"name", "sample_chain_rows 1 row vocab " + std::to_string(v)}, {"us", chain_us}});
      const std::vector<cuda::RejectionWindow> w4{{0, -1, 4, 0, 0}};
      CUDA_OK(cudaMemcpy(dw.get(), w4.data(), sizeof(cuda::RejectionWindow), cudaMemcpyHostToDevice));
      const double rej_us = time_us(stream, 10, 200, [&] {
        cuda::rejection_sample(drow.get(), v, nullptr, v, dd4.get(), du5.get(), dw.get(), 1, v, 0.8f, dacc.get(),
                               dnext.get(), stream);
      });
      report.timing(
          {{"name", "rejection_sample 4 drafts vocab " + std::to_string(v) + " (all accepted)"}, {"us", rej_us}});
    }
  }
}

}  // namespace specpipe::gpu_check
