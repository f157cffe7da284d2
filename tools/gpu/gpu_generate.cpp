// specpipe_gpu_generate: the demo pair on the GPU (CudaTransformer) against the golden data
// and the CPU Transformer (issue 6). For every public case of tests/data/golden-public.json:
//   (a) plain greedy 96 tokens on the GPU == target_greedy_96 (a divergence is reported
//       with its position and the logit gap; a gap under --tie-tol is a near-tie),
//   (b) last-prompt-position logits of the GPU vs the CPU Transformer (and vs the
//       reference's float32 logits where the case has them): max abs difference,
//   (c) greedy speculation with the draft model on the GPU for gamma 1..8: output ==
//       the GPU's plain output, accepted count per round == spec.<gamma> where present,
//   (d) unless --no-timing: plain and speculative tok/s over all cases at batch 1
//       (median of --repeat sweeps), and the target's verify-window cost for n = 1..9,
//   (e) with CUDA graphs on (the default; --no-graphs turns them off): every case's plain
//       run with graphs off and on gives bitwise-identical logits at every step and the
//       same tokens, and speculation (gamma 5) the same tokens and accepted counts, also
//       with the drafts made one forward per token instead of one greedy chain,
//   (g) copy-on-write of a shared prefix-cache block through the model's
//       queue_block_copy: the rolled-back sequence and the one it shared with both
//       decode the plain output (block_copy_check.cpp).
// --synthetic NAME (tools/gpu/synthetic_models.h: llama3-8b, llama3.1-8b, llama3-1b, qwen3-0.6b,
// qwen3-4b, qwen3-8b) instead benchmarks a model of that
// shape with seeded random BF16 weights made on the device: decode step at batch 1 after
// --context tokens (prefilled up to --prefill-max, 16,384 by default, only booked past
// it) against the floor (matrix bytes / device-to-device copy rate measured
// in the same run), verify windows n = 1..9 relative to one decode step, graphs off and
// on, and graph vs eager bitwise identity of the logits (synthetic_bench.cpp).
// --offload-check (issue 16): offload == all-on-GPU bit for bit on the --target model and on
// the --synthetic shape (qwen3-0.6b by default), --context prompt tokens (offload_check.cpp).
// --offload-bench with --synthetic NAME --context N [--ring-slots N] [--pool-tokens N]: decode
// ms/token all on the GPU vs host tier + ring (overlap) vs in-line copies, PCIe floor
// (offload_bench.cpp). --prefill-bench with --synthetic NAME --context N [--chunk N] [--ring-slots N]
// [--pool-tokens N] [--prefill-ways chunked,layerwise,sync]: prefill tokens/s all on the GPU
// vs offloaded chunk by chunk (write-back beside the compute) vs the seed's in-line copies,
// vs layer-wise (copies beside the next layer, or in line), and whether their last logits
// and K/V are the same bits (prefill_bench.cpp).
// --kv-dtype fp32|bf16 (default fp32): the K/V store's element type
// in every mode; with bf16, --offload-check also reports BF16-vs-FP32 logits (bounded).
// Prints one JSON object; exits 1 on a token mismatch that is not a near-tie (or on an
// error). Links no CAF / ZeroMQ / yaml-cpp: runs from the GPU bundle.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/cuda/cuda_transformer.h"
#include "model/load_model.h"
#include "model/transformer.h"
#include "tools/gpu/block_copy_check.h"
#include "tools/gpu/offload_bench.h"
#include "tools/gpu/prefill_bench.h"
#include "tools/gpu/offload_check.h"
#include "tools/gpu/synthetic_bench.h"
#include "tools/gpu/synthetic_models.h"
#include "tools/gpu/tool_support.h"

using namespace specpipe;
using namespace specpipe::gpu_tool;
using json = nlohmann::json;

namespace {

struct PlainRun {
  std::vector<int32_t> tokens;
  std::vector<float> first_logits;     // after the prompt (when kept)
  std::vector<double> gap_at;          // |logit(chosen) - logit(reference)| where they differ
  double prefill_ms = 0, decode_ms = 0;
};

/// Plain greedy decoding on the GPU. `want` (may be empty): reference tokens; at the first
/// position where ours differs, the gap between the two tokens' logits is recorded.
PlainRun gpu_plain(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t max_new,
                   const std::vector<int32_t>& want, bool keep_logits, std::vector<float>* step_logits = nullptr) {
  PlainRun r;
  CudaLogits lg;
  m.set_copy_logits(keep_logits || !want.empty() || step_logits);
  const auto t0 = Clock::now();
  const SeqId seq = kv.add_sequence(prompt);
  gpu_prefill(m, kv, seq, prompt, LogitsMode::last, lg);
  r.prefill_ms = ms_since(t0);
  if (keep_logits) r.first_logits.assign(lg.row(0).begin(), lg.row(0).end());
  const auto t1 = Clock::now();
  for (;;) {
    const int32_t token = lg.argmax(0);
    if (step_logits) step_logits->insert(step_logits->end(), lg.row(0).begin(), lg.row(0).end());
    const size_t i = r.tokens.size();
    if (!want.empty() && i < want.size() && token != want[i] && r.gap_at.empty()) {
      const auto row = lg.row(0);
      r.gap_at.push_back(static_cast<double>(i));
      r.gap_at.push_back(std::abs(double{row[static_cast<size_t>(token)]} - row[static_cast<size_t>(want[i])]));
    }
    r.tokens.push_back(token);
    if (static_cast<int32_t>(r.tokens.size()) >= max_new) break;
    kv.reserve(seq, kv.length(seq) + 1);
    const ForwardWindow w{seq, {&r.tokens.back(), 1}, LogitsMode::last};
    m.forward({&w, 1}, kv, lg);
    kv.commit(seq, {&r.tokens.back(), 1});
  }
  r.decode_ms = ms_since(t1);
  kv.release(seq);
  return r;
}

struct SpecRun {
  std::vector<int32_t> tokens;
  std::vector<int32_t> accepted_per_round;
  double ms = 0;
  double prefill_ms = 0, draft_ms = 0, verify_ms = 0;  // parts of ms (the rest: host work between)
};

/// Greedy draft-model speculation, the engine's round protocol (actors/scheduler_actor):
/// context = prompt[:-1] is prefilled into both models; the pending token starts as the
/// last prompt token; each round the draft proposes gamma tokens from its own KV, the
/// target verifies [pending, d1..d_gamma] in one window (all logits), k drafts are
/// accepted plus the target's token; both KVs keep exactly the accepted prefix.
/// chain: the drafts of a round come from one forward_greedy_chain (no host round trip
/// per draft token) instead of gamma forward() calls.
SpecRun gpu_spec(CudaTransformer& target, KvStore& kvt, CudaTransformer& draft, KvStore& kvd,
                 const std::vector<int32_t>& prompt, int32_t max_new, int32_t gamma, bool chain = true) {
  SpecRun r;
  target.set_copy_logits(false);
  draft.set_copy_logits(false);
  CudaLogits lt, ld;
  const auto t0 = Clock::now();
  const SeqId st = kvt.add_sequence(prompt);
  const SeqId sd = kvd.add_sequence(prompt);
  std::vector<int32_t> seq(prompt.begin(), prompt.end());  // prompt + output so far
  const std::span<const int32_t> context(prompt.data(), prompt.size() - 1);
  if (!context.empty()) {
    gpu_prefill(target, kvt, st, context, LogitsMode::none, lt);
    gpu_prefill(draft, kvd, sd, context, LogitsMode::none, ld);
  }
  r.prefill_ms = ms_since(t0);
  std::vector<int32_t> window;
  while (static_cast<int32_t>(r.tokens.size()) < max_new) {
    const auto len = static_cast<int32_t>(seq.size());  // target has len - 1 committed
    // Draft: feed what it has not seen (ends with the pending token), then its drafts.
    const int32_t dl = kvd.length(sd);
    kvd.reserve(sd, len + gamma - 1);
    window.assign(seq.begin() + dl, seq.end());
    std::vector<int32_t> drafts;
    const auto td = Clock::now();
    if (chain) {
      const ForwardWindow w{sd, window, LogitsMode::last};
      draft.forward_greedy_chain({&w, 1}, gamma, kvd, drafts);
    } else {
      const ForwardWindow w{sd, window, LogitsMode::last};
      draft.forward({&w, 1}, kvd, ld);
      drafts.push_back(ld.argmax(0));
    }
    for (int32_t j = 1; j < gamma && !chain; ++j) {
      const ForwardWindow w{sd, {&drafts.back(), 1}, LogitsMode::last, len + j - 1};
      draft.forward({&w, 1}, kvd, ld);
      drafts.push_back(ld.argmax(0));
    }
    r.draft_ms += ms_since(td);
    // Verify [pending, d1..dg].
    window.assign(1, seq.back());
    window.insert(window.end(), drafts.begin(), drafts.end());
    kvt.reserve(st, len + gamma);
    const ForwardWindow w{st, window, LogitsMode::all};
    const auto tv = Clock::now();
    target.forward({&w, 1}, kvt, lt);
    r.verify_ms += ms_since(tv);
    int32_t k = 0;
    while (k < gamma && lt.argmax(0, k) == drafts[static_cast<size_t>(k)]) ++k;
    const int32_t bonus = lt.argmax(0, k);
    // Target KV: [pending, d1..dk] become committed.
    kvt.commit(st, {window.data(), static_cast<size_t>(k) + 1});
    kvt.truncate(st, kvt.length(st));
    // Draft KV: what it was fed plus d1..d_min(k, gamma-1) holds valid K/V.
    const int32_t keep = std::min(k, gamma - 1);
    std::vector<int32_t> dcommit(seq.begin() + dl, seq.end());
    dcommit.insert(dcommit.end(), drafts.begin(), drafts.begin() + keep);
    kvd.commit(sd, dcommit);
    kvd.truncate(sd, kvd.length(sd));
    for (int32_t i = 0; i < k; ++i) {
      seq.push_back(drafts[static_cast<size_t>(i)]);
      r.tokens.push_back(drafts[static_cast<size_t>(i)]);
    }
    seq.push_back(bonus);
    r.tokens.push_back(bonus);
    r.accepted_per_round.push_back(k);
  }
  r.tokens.resize(static_cast<size_t>(max_new));
  r.ms = ms_since(t0);
  kvt.release(st);
  kvd.release(sd);
  return r;
}

/// The CPU Transformer's last-position logits after `prompt` (chunked prefill).
std::vector<float> cpu_last_logits(Transformer& m, const std::vector<int32_t>& prompt) {
  KvStoreConfig kc = m.kv_config(static_cast<int32_t>(prompt.size() / 16 + 2));
  kc.prefix_cache = false;
  KvStore kv(kc);
  DirectKvWriter writer(kv);
  const SeqId seq = kv.add_sequence(prompt);
  Logits lg;
  const std::span<const int32_t> all(prompt);
  for (size_t at = 0; at < all.size(); at += kPrefillChunk) {
    const auto chunk = all.subspan(at, std::min<size_t>(kPrefillChunk, all.size() - at));
    kv.reserve(seq, kv.length(seq) + static_cast<int32_t>(chunk.size()));
    const ForwardWindow w{seq, chunk, LogitsMode::last};
    m.forward({&w, 1}, kv, writer, lg);
    kv.commit(seq, chunk);
  }
  return {lg.row(0).begin(), lg.row(0).end()};
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

int32_t argmax_of(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

/// The fused draft step (`fused`) against the per-kernel draft forward (`kernels`): plain
/// greedy draft decoding of every case on both; the logits at each step up to the first
/// token that differs, and that token's margin (a difference is allowed only at a
/// near-tie, gap < tie_tol). Clears `ok` on a mismatch, more than max_near_ties near-ties
/// or logits further than logit_tol.
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

/// The draft-ahead path of the model (launch_greedy_chain / collect_greedy_chain) against
/// forward_greedy_chain: for the first cases, a chain of `steps` after the prompt, run
/// three times on one sequence (nothing is committed, so each run starts at the same
/// position and writes the same K/V): synchronously, launched then collected, and launched
/// with a forward in between (which must wait for the chain and keep its ids for
/// collect). Clears `ok` on any difference.
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

/// --offload-check: the real target model and a synthetic shape (offload_check.h).
json offload_checks(const std::string& target_dir, const std::string& shape, int32_t prompt_len, uint64_t seed,
                    CudaTransformerOptions opt, bool& ok) {
  json r;
  const int32_t steps = 40;
  const int32_t blocks = (prompt_len + steps + 64) / 16 + 4;
  // A store of another dtype than FP32 (BF16): its logits against the FP32 store's, on
  // the same weights and inputs. Observed on an H100: see docs/BENCHMARKS.md section 6.
  const bool other_dtype = opt.kv_dtype != DType::f32;
  CudaTransformerOptions f32_opt = opt;
  f32_opt.kv_dtype = DType::f32;
  const double kv_tol = 0.02;  // of the largest logit magnitude
  {
    const std::unique_ptr<Transformer> cpu = load_transformer(target_dir);
    CudaTransformer m(cpu->config(), cpu->weights(), blocks, 16, opt);
    r["target"] = offload_check(m, prompt_len, steps, seed, ok);
    r["target"]["model"] = target_dir;
    if (other_dtype) {
      CudaTransformer f32(cpu->config(), cpu->weights(), blocks, 16, f32_opt);
      r["target"]["vs_fp32_kv"] = kv_dtype_error(f32, m, prompt_len, steps, seed, kv_tol, ok);
    }
  }
  const ModelConfig c = synthetic_model_config(shape);
  auto m = CudaTransformer::random(c, seed, blocks, 16, opt);
  r["synthetic"] = offload_check(*m, prompt_len, steps, seed, ok);
  r["synthetic"]["model"] = shape;
  if (other_dtype) {
    auto f32 = CudaTransformer::random(c, seed, blocks, 16, f32_opt);
    r["synthetic"]["vs_fp32_kv"] = kv_dtype_error(*f32, *m, prompt_len, steps, seed, kv_tol, ok);
  }
  return r;
}

int main(int argc, char** argv) {
  std::string target_dir = "models/demo-target", draft_dir = "models/demo-draft",
              golden_path = "tests/data/golden-public.json";
  int repeat = 3;
  size_t max_cases = 1000;
  CudaTransformerOptions gpu_options;
  std::optional<CudaGemm> draft_gemm;  // the draft model's own GEMM (default: --gemm's)
  bool fused_draft = false;            // the draft's small forwards as one fused kernel
  int32_t fused_blocks = 0;
  bool fused_trace = false;            // report the fused kernel's phase clocks
  bool timing = true;
  // Observed on the H100: the target's last-position logits within 0.049 (cuBLASLt) /
  // 0.066 (row GEMM) of the CPU forward's (kernels/cuda/README.md), 0.0666 with the
  // default GEMM (mma) on 2026-11-25; the fused draft's within 0.055 of the per-kernel
  // draft's, one near-tie in its 16 cases (gap 0.006); none in the plain runs (16 / 16
  // identical). The tolerances: about twice the largest error, a near-tie only where the
  // two tokens' logits are within about one observed error, at most one per check.
  double tie_tol = 0.05;
  double logit_tol = 0.13;
  int max_near_ties = 1;
  std::string synthetic;
  int32_t context = 512;
  int32_t prefill_max = 16384;
  uint64_t seed = 1;
  int iters = 30;
  bool offload_check_mode = false, offload_bench_mode = false, prefill_bench_mode = false;
  int32_t chunk = 1024;  // --prefill-bench: tokens a prefill forward (the most CudaTransformer takes)
  int32_t ring_slots = 4;
  int32_t pool_tokens = 0;  // --offload-bench: tokens kept in the GPU pool (0: automatic)
  std::string prefill_ways = "chunked,layerwise,sync";  // --prefill-bench: the offloaded ways
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--target") target_dir = next();
    else if (a == "--draft") draft_dir = next();
    else if (a == "--golden") golden_path = next();
    else if (a == "--repeat") repeat = std::stoi(next());
    else if (a == "--tie-tol") tie_tol = std::stod(next());
    else if (a == "--logit-tol") logit_tol = std::stod(next());
    else if (a == "--max-near-ties") max_near_ties = std::stoi(next());
    else if (a == "--cases") max_cases = static_cast<size_t>(std::stoul(next()));
    else if (a == "--no-timing") timing = false;
    else if (a == "--no-graphs") gpu_options.graphs = false;
    else if (a == "--synthetic") synthetic = next();
    else if (a == "--context") context = std::stoi(next());
    else if (a == "--prefill-max") prefill_max = std::stoi(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--iters") iters = std::stoi(next());
    else if (a == "--fused-draft") fused_draft = true;
    else if (a == "--offload-check") offload_check_mode = true;
    else if (a == "--offload-bench") offload_bench_mode = true;
    else if (a == "--prefill-bench") prefill_bench_mode = true;
    else if (a == "--chunk") chunk = std::stoi(next());
    else if (a == "--ring-slots") ring_slots = std::stoi(next());
    else if (a == "--pool-tokens") pool_tokens = std::stoi(next());
    else if (a == "--prefill-ways") prefill_ways = next();
    else if (a == "--kv-dtype") {
      const std::string d = next();
      if (d == "fp32" || d == "f32") gpu_options.kv_dtype = DType::f32;
      else if (d == "bf16") gpu_options.kv_dtype = DType::bf16;
      else {
        std::fprintf(stderr, "--kv-dtype: %s is not fp32 or bf16\n", d.c_str());
        return 2;
      }
    }
    else if (a == "--fused-blocks") fused_blocks = std::stoi(next());
    else if (a == "--fused-trace") fused_trace = true;
    else if (a == "--gemm" || a == "--draft-gemm") {
      CudaGemm choice{};
      try {
        choice = parse_cuda_gemm(next());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", a.c_str(), e.what());
        return 2;
      }
      if (a == "--gemm") gpu_options.gemm = choice;
      else draft_gemm = choice;
    }
    else {
      std::fprintf(stderr,
                   "usage: %s [--target DIR] [--draft DIR] [--golden FILE] [--repeat N] [--no-timing] "
                   "[--tie-tol X] [--logit-tol X] [--max-near-ties N] [--cases N] [--gemm auto|cublaslt|rows|mma] [--draft-gemm auto|cublaslt|rows|mma] "
                   "[--no-graphs] [--fused-draft [--fused-blocks N] [--fused-trace]] "
                   "[--synthetic NAME [--context N] [--prefill-max N] [--seed S] [--iters N]] "
                   "[--offload-check | --offload-bench [--ring-slots N] [--pool-tokens N] | --prefill-bench [--chunk N] "
                   "[--ring-slots N] [--pool-tokens N] [--prefill-ways LIST]] "
                   "[--kv-dtype fp32|bf16]\n",
                   argv[0]);
      return 2;
    }
  }
  json report;
  bool ok = true;
  // The one-report modes: run, print the JSON (with the error if it threw), exit 1 unless ok.
  auto single_report = [&](const std::function<json()>& make) {
    try {
      report = make();
      report["pass"] = ok;
    } catch (const std::exception& e) {
      report["error"] = e.what();
      report["pass"] = false;
      ok = false;
    }
    std::cout << report.dump(1) << std::endl;
    return ok ? 0 : 1;
  };
  if (offload_bench_mode)
    return single_report(
        [&] { return offload_bench(synthetic, context, ring_slots, pool_tokens, seed, iters, gpu_options); });
  if (prefill_bench_mode)
    return single_report(
        [&] { return prefill_bench(synthetic, context, chunk, ring_slots, pool_tokens, seed, gpu_options,
                                        prefill_ways); });
  if (offload_check_mode)
    return single_report([&] {
      return offload_checks(target_dir, synthetic.empty() ? "qwen3-0.6b" : synthetic, context, seed, gpu_options, ok);
    });
  if (!synthetic.empty())
    return single_report([&] { return synthetic_bench(synthetic, context, prefill_max, seed, iters, gpu_options, ok); });
  try {
    std::ifstream in(golden_path);
    if (!in) throw std::runtime_error("cannot open " + golden_path);
    const json golden = json::parse(in);
    json cases = json::array();
    for (const auto& c : golden["cases"])
      if (cases.size() < max_cases) cases.push_back(c);

    auto t_load = Clock::now();
    std::unique_ptr<Transformer> cpu_target = load_transformer(target_dir);
    std::unique_ptr<Transformer> cpu_draft = load_transformer(draft_dir);
    int32_t max_ctx = 0;
    for (const auto& c : cases) max_ctx = std::max<int32_t>(max_ctx, static_cast<int32_t>(c["prompt_ids"].size()));
    const int32_t blocks = (max_ctx + 96 + 16 + 16) / 16 + 2;
    CudaTransformer gt(cpu_target->config(), cpu_target->weights(), blocks, 16, gpu_options);
    CudaTransformerOptions draft_options = gpu_options;
    if (draft_gemm) draft_options.gemm = *draft_gemm;
    draft_options.fused_step = fused_draft;
    draft_options.fused_blocks = fused_blocks;
    draft_options.fused_trace = fused_trace;
    CudaTransformer gd(cpu_draft->config(), cpu_draft->weights(), blocks, 16, draft_options);
    if (fused_draft && !gd.fused_step_active())
      throw std::runtime_error("--fused-draft: the fused step does not serve the draft: " + gd.fused_step_refusal());
    report["draft_fused_step"] = gd.fused_step_active();
    report["gemm"] = to_string(gt.gemm());
    report["draft_gemm"] = to_string(gd.gemm());
    KvStore kvt(gt.kv_config()), kvd(gd.kv_config());
    report["load_ms"] = ms_since(t_load);
    {
      int dev = 0;
      cudaDeviceProp prop{};
      cudaGetDevice(&dev);
      cudaGetDeviceProperties(&prop, dev);
      report["device"] = prop.name;
    }
    report["gemm_algorithms_target"] = gt.gemm_algorithms();
    report["device_bytes"] = {{"target", gt.device_bytes()}, {"draft", gd.device_bytes()}};
    report["tie_tol"] = tie_tol;
    report["logit_tol"] = logit_tol;
    report["max_near_ties"] = max_near_ties;

    // (a) + (b)
    json plain_cases = json::array();
    std::vector<std::vector<int32_t>> plain_out;
    std::vector<bool> plain_matches;
    double worst_cpu = 0, worst_ref = 0;
    int exact = 0, near_ties = 0, mismatches = 0;
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const auto& c = cases[ci];
      const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
      const auto want = c["target_greedy_96"].get<std::vector<int32_t>>();
      const PlainRun r = gpu_plain(gt, kvt, prompt, static_cast<int32_t>(want.size()), want, true);
      const std::vector<float> cpu = cpu_last_logits(*cpu_target, prompt);
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
    report["plain"] = {{"cases", plain_cases},
                       {"identical", exact},
                       {"near_ties", near_ties},
                       {"mismatches", mismatches},
                       {"worst_logits_vs_cpu", worst_cpu},
                       {"worst_logits_vs_reference", worst_ref}};

    // (c)
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
    report["spec"] = spec;
    report["graphs"] = gpu_options.graphs;

    // (e) graphs vs eager, bit for bit
    if (gpu_options.graphs) {
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
      report["graph_vs_eager"] = {{"plain_logits_bitwise_equal_every_step", logits_equal},
                                  {"plain_tokens_equal", tokens_equal},
                                  {"spec_gamma5_tokens_and_rounds_equal", spec_equal},
                                  {"spec_gamma5_chain_equals_steps", chain_equal},
                                  {"cases", cases.size()},
                                  {"problems", bad},
                                  {"target_graphs", gt.graph_count()},
                                  {"draft_graphs", gd.graph_count()}};
    }

    // (g) copy-on-write of a shared prefix block, on the device
    report["block_copy"] = check_block_copy(gt, cases, 32, ok);

    // (f) the fused draft step against the per-kernel draft forward
    if (fused_draft) {
      CudaTransformerOptions ref_options = draft_options;
      ref_options.fused_step = false;
      CudaTransformer gd_ref(cpu_draft->config(), cpu_draft->weights(), blocks, 16, ref_options);
      report["fused_draft_vs_kernels"] = compare_fused_draft(gd, gd_ref, kvd, cases, tie_tol, logit_tol, max_near_ties, ok);
      report["fused_draft_vs_kernels"]["fused_blocks"] = fused_blocks;
    }

    // (g) a launched chain (draft-ahead) == the synchronous chain
    report["launched_chain"] = compare_launched_chain(gd, kvd, cases, 5, ok);

    // The fused kernel's phases (SM clock cycles of block 0 between barriers) in a draft
    // decode step after case 0's prompt.
    if (fused_draft && fused_trace) {
      const auto prompt = cases[0]["prompt_ids"].get<std::vector<int32_t>>();
      CudaLogits lg;
      const SeqId sd = kvd.add_sequence(prompt);
      gpu_prefill(gd, kvd, sd, prompt, LogitsMode::none, lg);
      kvd.reserve(sd, kvd.length(sd) + 1);
      const ForwardWindow w{sd, {&prompt.back(), 1}, LogitsMode::last};
      for (int i = 0; i < 20; ++i) gd.forward({&w, 1}, kvd, lg);
      report["fused_trace_cycles"] = gd.fused_trace();
      kvd.release(sd);
    }

    // (d)
    if (timing) {
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
      report["timing"] = t;
    }
    report["pass"] = ok;
  } catch (const std::exception& e) {
    report["error"] = e.what();
    report["pass"] = false;
    ok = false;
  }
  std::cout << report.dump(1) << std::endl;
  return ok ? 0 : 1;
}
