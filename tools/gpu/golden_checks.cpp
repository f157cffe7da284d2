// specpipe_gpu_generate's checks of the demo pair on the GPU (golden_checks.h).
#include "tools/gpu/golden_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/sampling.h"
#include "model/load_model.h"
#include "pipeline/rng.h"
#include "tools/gpu/golden_runs.h"
#include "tools/gpu/tool_support.h"

namespace specpipe::gpu_tool {

using json = nlohmann::json;

json check_plain(CudaTransformer& gt, KvStore& kvt, Transformer& cpu_target, const json& cases, double tie_tol,
                 double logit_tol, int max_near_ties, std::vector<std::vector<int32_t>>& plain_out,
                 std::vector<bool>& plain_matches, bool& ok) {
  json plain_cases = json::array();
  double worst_cpu = 0, worst_ref = 0;
  int exact = 0, near_ties = 0, mismatches = 0;
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& c = cases[ci];
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = c["target_greedy_96"].get<std::vector<int32_t>>();
    const PlainRun r = gpu_plain(gt, kvt, prompt, static_cast<int32_t>(want.size()), want, true);
    const std::vector<float> cpu = cpu_last_logits(cpu_target, prompt);
    json jc;
    jc["case"] = ci;
    jc["prompt_tokens"] = prompt.size();
    const double d_cpu = max_abs_diff(r.first_logits, cpu);
    worst_cpu = std::max(worst_cpu, d_cpu);
    jc["logits_max_abs_vs_cpu"] = d_cpu;
    jc["argmax_equal_cpu"] = argmax_of(r.first_logits) == argmax_of(cpu);
    if (c.contains("target_last_logits")) {
      const double d_ref = max_abs_diff(r.first_logits, c["target_last_logits"].get<std::vector<float>>());
      worst_ref = std::max(worst_ref, d_ref);
      jc["logits_max_abs_vs_reference"] = d_ref;
    }
    if (d_cpu > logit_tol) ok = false;
    if (r.gap_at.empty()) {
      ++exact;
      jc["tokens"] = "identical";
    } else {
      jc["first_divergence"] = static_cast<int>(r.gap_at[0]);
      jc["logit_gap"] = r.gap_at[1];
      if (r.gap_at[1] < tie_tol) {
        ++near_ties;
        jc["tokens"] = "near-tie";
      } else {
        ++mismatches;
        jc["tokens"] = "MISMATCH";
        ok = false;
      }
    }
    plain_cases.push_back(jc);
    plain_out.push_back(r.tokens);
    plain_matches.push_back(r.gap_at.empty());
  }
  if (near_ties > max_near_ties) ok = false;
  return {{"cases", plain_cases},
          {"identical", exact},
          {"near_ties", near_ties},
          {"mismatches", mismatches},
          {"worst_logits_vs_cpu", worst_cpu},
          {"worst_logits_vs_reference", worst_ref}};
}

json check_spec(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd, const json& cases,
                const std::vector<std::vector<int32_t>>& plain_out, const std::vector<bool>& plain_matches, bool& ok) {
  json spec = json::object();
  for (int32_t gamma = 1; gamma <= 8; ++gamma) {
    int out_equal = 0, rounds_equal = 0, rounds_checked = 0, rounds = 0, accepted = 0;
    json bad = json::array();
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const auto& c = cases[ci];
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const SpecRun r = gpu_spec(gt, kvt, gd, kvd, prompt, 96, gamma);
      rounds += static_cast<int>(r.accepted_per_round.size());
      for (int32_t k : r.accepted_per_round) accepted += k;
      const bool same = r.tokens == plain_out[ci];
      out_equal += same;
      if (!same) {
        bad.push_back({{"case", ci}, {"output_differs_from_plain_at", first_difference(r.tokens, plain_out[ci])}});
        ok = false;
      }
      const std::string g = std::to_string(gamma);
      if (c.contains("spec") && c["spec"].contains(g) && plain_matches[ci]) {
        ++rounds_checked;
        const auto want = c["spec"][g]["accepted_per_round"].get<std::vector<int32_t>>();
        if (want == r.accepted_per_round) {
          ++rounds_equal;
        } else {
          // Reported, not fatal: the output is checked above; a different count means
          // the BF16 draft proposed another token than the float32 reference draft.
          size_t round = 0;
          while (round < want.size() && round < r.accepted_per_round.size() && want[round] == r.accepted_per_round[round])
            ++round;
          json d = {{"case", ci}, {"accepted_per_round_differs_at_round", round}};
          if (round < want.size()) d["reference"] = want[round];
          if (round < r.accepted_per_round.size()) d["ours"] = r.accepted_per_round[round];
          bad.push_back(d);
        }
      }
    }
    spec[std::to_string(gamma)] = {{"output_equals_plain", out_equal},
                                   {"cases", cases.size()},
                                   {"accepted_per_round_checked", rounds_checked},
                                   {"accepted_per_round_equal", rounds_equal},
                                   {"rounds", rounds},
                                   {"mean_accepted", rounds ? double(accepted) / rounds : 0.0},
                                   {"problems", bad}};
  }
  return spec;
}

json check_graphs_vs_eager(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd, const json& cases,
                           bool& ok) {
  int logits_equal = 0, tokens_equal = 0, spec_equal = 0, chain_equal = 0;
  json bad = json::array();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto prompt = cases[ci]["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<float> la, lb;
    gt.set_graphs(false);
    const PlainRun a = gpu_plain(gt, kvt, prompt, 96, {}, false, &la);
    gt.set_graphs(true);
    const PlainRun b = gpu_plain(gt, kvt, prompt, 96, {}, false, &lb);
    const bool same_logits = la.size() == lb.size() && std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0;
    logits_equal += same_logits;
    tokens_equal += a.tokens == b.tokens;
    gt.set_graphs(false);
    gd.set_graphs(false);
    const SpecRun sa = gpu_spec(gt, kvt, gd, kvd, prompt, 96, 5);
    gt.set_graphs(true);
    gd.set_graphs(true);
    const SpecRun sb = gpu_spec(gt, kvt, gd, kvd, prompt, 96, 5);
    const bool same_spec = sa.tokens == sb.tokens && sa.accepted_per_round == sb.accepted_per_round;
    spec_equal += same_spec;
    // The draft chain against gamma separate draft forwards (graphed).
    const SpecRun sc = gpu_spec(gt, kvt, gd, kvd, prompt, 96, 5, /*chain=*/false);
    const bool same_chain = sc.tokens == sb.tokens && sc.accepted_per_round == sb.accepted_per_round;
    chain_equal += same_chain;
    if (!same_logits || a.tokens != b.tokens || !same_spec || !same_chain) {
      bad.push_back({{"case", ci}, {"logits", same_logits}, {"tokens", a.tokens == b.tokens}, {"spec", same_spec},
                     {"chain", same_chain}});
      ok = false;
    }
  }
  return {{"plain_logits_bitwise_equal_every_step", logits_equal},
          {"plain_tokens_equal", tokens_equal},
          {"spec_gamma5_tokens_and_rounds_equal", spec_equal},
          {"spec_gamma5_chain_equals_steps", chain_equal},
          {"cases", cases.size()},
          {"problems", bad},
          {"target_graphs", gt.graph_count()},
          {"draft_graphs", gd.graph_count()}};
}

json compare_qkv_rope(const std::string& model_dir, const json& cases, const CudaTransformerOptions& options,
                      bool& ok) {
  const std::unique_ptr<Transformer> cpu = load_transformer(model_dir);
  const ModelConfig& c = cpu->config();
  std::vector<std::vector<int32_t>> prompts;
  size_t longest = 0;
  for (const auto& cs : cases) {
    auto p = cs["prompt_ids"].get<std::vector<int32_t>>();
    for (int32_t& t : p) t %= c.vocab_size;
    longest = std::max(longest, p.size());
    prompts.push_back(std::move(p));
  }
  const int32_t new_tokens = 48;
  const auto blocks = static_cast<int32_t>((longest + new_tokens + 32) / 16 + 2);
  CudaTransformerOptions on = options, off = options;
  on.qkv_rope = true;
  off.qkv_rope = false;
  CudaTransformer fused(c, cpu->weights(), blocks, 16, on), apart(c, cpu->weights(), blocks, 16, off);
  KvStore kv_fused(fused.kv_config()), kv_apart(apart.kv_config());
  const auto algorithms = fused.gemm_algorithms();
  const bool active = !algorithms.empty() && algorithms.front().find("rope") != std::string::npos;
  const char* env = std::getenv("SPECPIPE_QKV_ROPE");
  if (!active && !(env && std::strcmp(env, "0") == 0)) ok = false;
  int equal = 0, runs = 0;
  json bad = json::array();
  for (size_t ci = 0; ci < prompts.size(); ++ci)
    for (bool graphs : {false, true}) {
      fused.set_graphs(graphs);
      apart.set_graphs(graphs);
      std::vector<float> lf, la;
      const PlainRun f = gpu_plain(fused, kv_fused, prompts[ci], new_tokens, {}, false, &lf);
      const PlainRun a = gpu_plain(apart, kv_apart, prompts[ci], new_tokens, {}, false, &la);
      const bool same = f.tokens == a.tokens && lf.size() == la.size() &&
                        std::memcmp(lf.data(), la.data(), lf.size() * sizeof(float)) == 0;
      equal += same;
      ++runs;
      if (!same) {
        bad.push_back({{"case", ci}, {"graphs", graphs}});
        ok = false;
      }
    }
  return {{"model", model_dir},
          {"epilogue_active", active},
          {"gemm_algorithms", algorithms},
          {"runs", runs},
          {"logits_bitwise_equal_every_step", equal},
          {"new_tokens", new_tokens},
          {"problems", bad}};
}

json compare_fused_draft(CudaTransformer& fused, CudaTransformer& kernels, KvStore& kv, const json& cases,
                         double tie_tol, double logit_tol, int max_near_ties, bool& ok) {
  const auto V = static_cast<size_t>(fused.config().vocab_size);
  int same = 0, ties = 0, bad_cases = 0;
  double worst = 0;
  json divergences = json::array();
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto prompt = cases[ci]["prompt_ids"].get<std::vector<int32_t>>();
    std::vector<float> lf, lk;
    const PlainRun f = gpu_plain(fused, kv, prompt, 96, {}, false, &lf);
    const PlainRun k = gpu_plain(kernels, kv, prompt, 96, {}, false, &lk);
    const size_t p = first_difference(f.tokens, k.tokens);
    const size_t compared = std::min(p + 1, f.tokens.size()) * V;  // steps fed the same tokens
    worst = std::max(worst, max_abs_diff({lf.data(), compared}, {lk.data(), compared}));
    if (p == f.tokens.size()) {
      ++same;
      continue;
    }
    const double gap = std::abs(double{lk[p * V + static_cast<size_t>(f.tokens[p])]} -
                                lk[p * V + static_cast<size_t>(k.tokens[p])]);
    if (gap < tie_tol) ++ties;
    else ++bad_cases;
    divergences.push_back({{"case", ci}, {"first_divergence", p}, {"logit_gap", gap}});
  }
  if (bad_cases > 0 || ties > max_near_ties || worst > logit_tol) ok = false;
  return {{"cases", cases.size()}, {"tokens_identical", same}, {"near_ties", ties}, {"mismatches", bad_cases},
          {"worst_logits_abs", worst}, {"divergences", divergences}};
}

json compare_launched_chain(CudaTransformer& m, KvStore& kv, const json& cases, int32_t steps, bool& ok) {
  int same = 0, checked = 0;
  CudaLogits lg;
  for (size_t ci = 0; ci < std::min<size_t>(cases.size(), 4); ++ci) {
    const auto prompt = cases[ci]["prompt_ids"].get<std::vector<int32_t>>();
    const std::span<const int32_t> context(prompt.data(), prompt.size() - 1);
    const SeqId seq = kv.add_sequence({});
    gpu_prefill(m, kv, seq, context, LogitsMode::none, lg);
    kv.reserve(seq, static_cast<int32_t>(prompt.size()) + steps - 1);
    const ForwardWindow w{seq, std::span<const int32_t>(&prompt.back(), 1), LogitsMode::last};
    std::vector<int32_t> want, direct, between;
    m.forward_greedy_chain({&w, 1}, steps, kv, want);
    m.launch_greedy_chain({&w, 1}, steps, kv);
    m.collect_greedy_chain(direct);
    m.launch_greedy_chain({&w, 1}, steps, kv);
    m.forward({&w, 1}, kv, lg);  // queued behind the chain; rewrites its first row's same K/V
    m.collect_greedy_chain(between);
    checked += 2;
    same += (direct == want) + (between == want);
    kv.release(seq);
  }
  if (same != checked) ok = false;
  return {{"steps", steps}, {"chains_checked", checked}, {"identical_to_forward_greedy_chain", same}};
}

json compare_sampled_chain(CudaTransformer& m, KvStore& kv, const json& cases, int32_t steps, bool& ok) {
  const auto V = static_cast<size_t>(m.config().vocab_size);
  const float temperature = 0.8f;
  int64_t draws = 0, token_diffs = 0, greedy_diffs = 0, compared_rows = 0;
  double worst_rel = 0;
  CudaLogits lg;
  std::vector<float> q_ref;
  for (size_t ci = 0; ci + 1 < std::min<size_t>(cases.size(), 4); ci += 2) {
    // Two sequences: window 0 sampled, window 1 greedy.
    std::vector<std::vector<int32_t>> prompts;
    std::vector<SeqId> seqs;
    for (size_t k = 0; k < 2; ++k) {
      prompts.push_back(cases[ci + k]["prompt_ids"].get<std::vector<int32_t>>());
      const std::vector<int32_t>& prompt = prompts.back();
      const SeqId seq = kv.add_sequence({});
      gpu_prefill(m, kv, seq, std::span<const int32_t>(prompt.data(), prompt.size() - 1), LogitsMode::none, lg);
      kv.reserve(seq, static_cast<int32_t>(prompt.size()) + steps - 1);
      seqs.push_back(seq);
    }
    const std::vector<float> temps{temperature, 0.0f};
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      Rng rng(seed * 97 + ci);
      std::vector<double> u(static_cast<size_t>(steps) * 2, 0.0);
      for (int32_t s = 0; s < steps; ++s) u[static_cast<size_t>(s) * 2] = rng.uniform();
      std::vector<ForwardWindow> windows;
      for (size_t k = 0; k < 2; ++k)
        windows.push_back({seqs[k], std::span<const int32_t>(&prompts[k].back(), 1), LogitsMode::last});
      std::vector<int32_t> ids;
      std::vector<float> q;
      m.forward_sampled_chain(windows, steps, {temps, u}, kv, ids, q);
      // The reference: a forward per step (nothing committed: explicit starts), the rows
      // copied back, the draw on the host. It feeds the chain's own tokens, so that a
      // draw moved by rounding does not change the later steps' inputs.
      std::vector<int32_t> fed(2);
      for (size_t k = 0; k < 2; ++k) {
        windows[k].start = kv.length(seqs[k]);
        fed[k] = prompts[k].back();
      }
      m.set_copy_logits(true);
      for (int32_t s = 0; s < steps; ++s) {
        for (size_t k = 0; k < 2; ++k) windows[k].tokens = {&fed[k], 1};
        m.forward(windows, kv, lg);
        const size_t at = static_cast<size_t>(s) * 2;
        greedy_diffs += lg.argmax(1) != ids[at + 1];
        cpu::sampling_distribution(lg.row(0), cpu::SamplingParams{temperature, 0, 1.0f}, q_ref);
        ++draws;
        token_diffs += cpu::sample_from(q_ref, u[at]) != ids[at];
        for (size_t t = 0; t < V; ++t) {  // relative, below 1e-20 absolute (subnormal floats)
          const double want = q_ref[t], got = q[at * V + t];
          worst_rel = std::max(worst_rel, std::abs(got - want) / std::max(std::abs(want), 1e-20));
        }
        ++compared_rows;
        for (size_t k = 0; k < 2; ++k) {
          windows[k].start += 1;
          fed[k] = ids[at + k];
        }
      }
      m.set_copy_logits(false);
    }
    for (SeqId seq : seqs) kv.release(seq);
  }
  if (token_diffs > 0 || greedy_diffs > 0 || worst_rel > 1e-6) ok = false;
  return {{"steps", steps},          {"temperature", temperature},  {"draws", draws},
          {"token_differences", token_diffs}, {"greedy_differences", greedy_diffs},
          {"q_rows", compared_rows}, {"worst_q_relative", worst_rel}};
}

json fused_trace_cycles(CudaTransformer& gd, KvStore& kvd, const json& cases) {
  const auto prompt = cases[0]["prompt_ids"].get<std::vector<int32_t>>();
  CudaLogits lg;
  const SeqId sd = kvd.add_sequence(prompt);
  gpu_prefill(gd, kvd, sd, prompt, LogitsMode::none, lg);
  kvd.reserve(sd, kvd.length(sd) + 1);
  const ForwardWindow w{sd, {&prompt.back(), 1}, LogitsMode::last};
  for (int i = 0; i < 20; ++i) gd.forward({&w, 1}, kvd, lg);
  json trace = gd.fused_trace();
  kvd.release(sd);
  return trace;
}

}  // namespace specpipe::gpu_tool
