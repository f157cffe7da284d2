// specpipe_gpu_generate's timings of the demo pair on the GPU (golden_timing.h).
#include "tools/gpu/golden_timing.h"

#include <functional>
#include <string>
#include <vector>

#include "pipeline/rng.h"
#include "tools/gpu/golden_runs.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

using json = nlohmann::json;

json golden_timing(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd, const json& cases, int repeat) {
  json t;
  const double tokens_total = 96.0 * static_cast<double>(cases.size());
  std::vector<double> plain_ms, plain_decode_ms;
  for (int rep = 0; rep < repeat; ++rep) {
    double total = 0, decode = 0;
    for (const auto& c : cases) {
      const PlainRun r = gpu_plain(gt, kvt, c["prompt_ids"].get<std::vector<int32_t>>(), 96, {}, false);
      total += r.prefill_ms + r.decode_ms;
      decode += r.decode_ms;
    }
    plain_ms.push_back(total);
    plain_decode_ms.push_back(decode);
  }
  t["plain"] = {{"tok_s", tokens_total / (median(plain_ms) / 1e3)},
                {"decode_only_tok_s", (tokens_total - static_cast<double>(cases.size())) / (median(plain_decode_ms) / 1e3)},
                {"sweep_ms", plain_ms}};
  json sg = json::object();
  double best = 0;
  int best_gamma = 0;
  for (int32_t gamma = 1; gamma <= 8; ++gamma) {
    std::vector<double> ms;
    for (int rep = 0; rep < repeat; ++rep) {
      double total = 0;
      for (const auto& c : cases) total += gpu_spec(gt, kvt, gd, kvd, c["prompt_ids"].get<std::vector<int32_t>>(), 96, gamma).ms;
      ms.push_back(total);
    }
    const double tps = tokens_total / (median(ms) / 1e3);
    sg[std::to_string(gamma)] = {{"tok_s", tps}, {"sweep_ms", ms}};
    if (tps > best) {
      best = tps;
      best_gamma = gamma;
    }
  }
  t["spec"] = sg;
  t["spec_best"] = {{"gamma", best_gamma}, {"tok_s", best}, {"speedup_vs_plain", best / t["plain"]["tok_s"].get<double>()}};
  {
    // The same best gamma with a draft forward per token (no chain), same run.
    std::vector<double> ms;
    for (int rep = 0; rep < repeat; ++rep) {
      double total = 0;
      for (const auto& c : cases)
        total += gpu_spec(gt, kvt, gd, kvd, c["prompt_ids"].get<std::vector<int32_t>>(), 96, best_gamma, false).ms;
      ms.push_back(total);
    }
    const double tps = tokens_total / (median(ms) / 1e3);
    // Where one sweep of the best gamma spends its time (chain on).
    SpecRun sum;
    size_t rounds = 0;
    for (const auto& c : cases) {
      const SpecRun r = gpu_spec(gt, kvt, gd, kvd, c["prompt_ids"].get<std::vector<int32_t>>(), 96, best_gamma);
      sum.ms += r.ms;
      sum.prefill_ms += r.prefill_ms;
      sum.draft_ms += r.draft_ms;
      sum.verify_ms += r.verify_ms;
      rounds += r.accepted_per_round.size();
    }
    t["spec_best_breakdown_ms"] = {{"total", sum.ms}, {"prefill", sum.prefill_ms}, {"draft", sum.draft_ms},
                                   {"verify", sum.verify_ms},
                                   {"host_between", sum.ms - sum.prefill_ms - sum.draft_ms - sum.verify_ms},
                                   {"rounds", rounds}};
    t["spec_best_without_chain"] = {{"gamma", best_gamma}, {"tok_s", tps},
                                    {"speedup_vs_plain", tps / t["plain"]["tok_s"].get<double>()}};
  }
  t["note"] = "tok/s = 96 tokens x cases / wall time incl. prefill, batch 1, median of repeat sweeps";

  // Verify-window cost on the target: context = case 0's prompt, windows of n tokens
  // (all logits) at the same positions, relative to n = 1 (a decode step).
  {
    const auto prompt = cases[0]["prompt_ids"].get<std::vector<int32_t>>();
    gt.set_copy_logits(false);
    CudaLogits lg;
    const SeqId s = kvt.add_sequence(prompt);
    gpu_prefill(gt, kvt, s, prompt, LogitsMode::none, lg);
    kvt.reserve(s, kvt.length(s) + 9);
    std::vector<int32_t> toks(9, prompt.back());
    json wcost = json::array();
    double base = 0;
    for (int32_t n = 1; n <= 9; ++n) {
      const ForwardWindow w{s, {toks.data(), static_cast<size_t>(n)}, n == 1 ? LogitsMode::last : LogitsMode::all};
      for (int i = 0; i < 20; ++i) gt.forward({&w, 1}, kvt, lg);
      std::vector<double> v;
      for (int i = 0; i < 200; ++i) {
        const auto t0 = Clock::now();
        gt.forward({&w, 1}, kvt, lg);
        v.push_back(ms_since(t0) * 1e3);
      }
      const double us = median(v);
      if (n == 1) base = us;
      wcost.push_back({{"n", n}, {"us", us}, {"relative", us / base}});
    }
    kvt.release(s);
    // The draft's decode step, for the round cost model.
    gd.set_copy_logits(false);
    const SeqId sd = kvd.add_sequence(prompt);
    gpu_prefill(gd, kvd, sd, prompt, LogitsMode::none, lg);
    kvd.reserve(sd, kvd.length(sd) + 1);
    const ForwardWindow w{sd, {toks.data(), 1}, LogitsMode::last};
    std::vector<double> v;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = Clock::now();
      gd.forward({&w, 1}, kvd, lg);
      v.push_back(ms_since(t0) * 1e3);
    }
    // The same step inside a greedy chain of 4 (one sync per chain), per token.
    kvd.reserve(sd, kvd.length(sd) + 4);
    std::vector<int32_t> ids;
    std::vector<double> vc;
    for (int i = 0; i < 200; ++i) {
      const auto t0 = Clock::now();
      gd.forward_greedy_chain({&w, 1}, 4, kvd, ids);
      vc.push_back(ms_since(t0) * 1e3 / 4);
    }
    kvd.release(sd);
    t["verify_window_us"] = wcost;
    t["draft_step_us"] = median(v);
    t["draft_chain4_us_per_token"] = median(vc);
    t["context_tokens"] = prompt.size();
  }
  return t;
}

json draft_chain_timing(CudaTransformer& gd, KvStore& kvd, const json& cases) {
  const auto prompt = cases[0]["prompt_ids"].get<std::vector<int32_t>>();
  CudaLogits lg;
  gd.set_copy_logits(false);
  const SeqId sd = kvd.add_sequence(prompt);
  gpu_prefill(gd, kvd, sd, prompt, LogitsMode::none, lg);
  kvd.reserve(sd, kvd.length(sd) + 4);
  const ForwardWindow w{sd, {&prompt.back(), 1}, LogitsMode::last};
  auto time_us = [&](const std::function<void()>& f) {
    for (int i = 0; i < 20; ++i) f();  // graphs captured
    std::vector<double> v;
    for (int i = 0; i < 300; ++i) {
      const auto t0 = Clock::now();
      f();
      v.push_back(ms_since(t0) * 1e3);
    }
    return median(v);
  };
  std::vector<int32_t> ids;
  std::vector<float> q;
  Rng rng(7);
  const std::vector<float> temps{0.8f};
  std::vector<double> u(4);
  json t;
  t["step_argmax_us"] = time_us([&] { gd.forward({&w, 1}, kvd, lg); });
  gd.set_copy_logits(true);
  t["step_row_to_host_us"] = time_us([&] { gd.forward({&w, 1}, kvd, lg); });
  gd.set_copy_logits(false);
  t["greedy_chain4_us"] = time_us([&] { gd.forward_greedy_chain({&w, 1}, 4, kvd, ids); });
  t["sampled_chain4_us"] = time_us([&] {
    for (double& x : u) x = rng.uniform();
    gd.forward_sampled_chain({&w, 1}, 4, {temps, u}, kvd, ids, q);
  });
  kvd.release(sd);
  return t;
}

}  // namespace specpipe::gpu_tool
