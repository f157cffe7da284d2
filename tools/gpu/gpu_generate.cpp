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
//       decode the plain output (block_copy_check.cpp),
//   (h) unless --rope-model "" : the qkv GEMM's RoPE + K/V epilogue against the GEMM and
//       qk_norm_rope_kv apart on a Llama-shaped model (models/llama-tiny-random): every
//       case's prompt (ids mod its vocabulary), 48 tokens, eager and graphed, logits
//       bitwise equal at every step.
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
// The parts: generate_options.h (the command line), golden_runs.h (plain and speculative
// runs), golden_checks.h ((a)-(c), (e)-(h)), golden_timing.h ((d)); the other modes in
// the files named above.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"
#include "model/load_model.h"
#include "model/transformer.h"
#include "tools/gpu/block_copy_check.h"
#include "tools/gpu/generate_options.h"
#include "tools/gpu/golden_checks.h"
#include "tools/gpu/golden_timing.h"
#include "tools/gpu/offload_bench.h"
#include "tools/gpu/offload_check.h"
#include "tools/gpu/prefill_bench.h"
#include "tools/gpu/synthetic_bench.h"
#include "tools/gpu/tool_support.h"

using namespace specpipe;
using namespace specpipe::gpu_tool;
using json = nlohmann::json;

namespace {

/// The demo pair against the golden data ((a)-(g) above), written into `report` as it goes
/// (so that an error keeps what came before it).
void golden_report(const GenerateOptions& o, json& report, bool& ok) {
  std::ifstream in(o.golden_path);
  if (!in) throw std::runtime_error("cannot open " + o.golden_path);
  const json golden = json::parse(in);
  json cases = json::array();
  for (const auto& c : golden["cases"])
    if (cases.size() < o.max_cases) cases.push_back(c);

  auto t_load = Clock::now();
  std::unique_ptr<Transformer> cpu_target = load_transformer(o.target_dir);
  std::unique_ptr<Transformer> cpu_draft = load_transformer(o.draft_dir);
  int32_t max_ctx = 0;
  for (const auto& c : cases) max_ctx = std::max<int32_t>(max_ctx, static_cast<int32_t>(c["prompt_ids"].size()));
  const int32_t blocks = (max_ctx + 96 + 16 + 16) / 16 + 2;
  CudaTransformer gt(cpu_target->config(), cpu_target->weights(), blocks, 16, o.gpu_options);
  CudaTransformerOptions draft_options = o.gpu_options;
  if (o.draft_gemm) draft_options.gemm = *o.draft_gemm;
  draft_options.fused_step = o.fused_draft;
  draft_options.fused_blocks = o.fused_blocks;
  draft_options.fused_trace = o.fused_trace;
  CudaTransformer gd(cpu_draft->config(), cpu_draft->weights(), blocks, 16, draft_options);
  if (o.fused_draft && !gd.fused_step_active())
    throw std::runtime_error("--fused-draft: the fused step does not serve the draft: " + gd.fused_step_refusal());
  report["draft_fused_step"] = gd.fused_step_active();
  report["gemm"] = to_string(gt.gemm());
  report["draft_gemm"] = to_string(gd.gemm());
  KvStore kvt(gt.kv_config()), kvd(gd.kv_config());
  report["load_ms"] = ms_since(t_load);
  report["device"] = device_name();
  report["gemm_algorithms_target"] = gt.gemm_algorithms();
  report["device_bytes"] = {{"target", gt.device_bytes()}, {"draft", gd.device_bytes()}};
  report["tie_tol"] = o.tie_tol;
  report["logit_tol"] = o.logit_tol;
  report["max_near_ties"] = o.max_near_ties;

  // (a) + (b)
  std::vector<std::vector<int32_t>> plain_out;
  std::vector<bool> plain_matches;
  report["plain"] = check_plain(gt, kvt, *cpu_target, cases, o.tie_tol, o.logit_tol, o.max_near_ties, plain_out,
                                plain_matches, ok);

  // (c)
  report["spec"] = check_spec(gt, kvt, gd, kvd, cases, plain_out, plain_matches, ok);
  report["graphs"] = o.gpu_options.graphs;

  // (e) graphs vs eager, bit for bit
  if (o.gpu_options.graphs) report["graph_vs_eager"] = check_graphs_vs_eager(gt, kvt, gd, kvd, cases, ok);

  // (g) copy-on-write of a shared prefix block, on the device
  report["block_copy"] = check_block_copy(gt, cases, 32, ok);

  // (f) the fused draft step against the per-kernel draft forward
  if (o.fused_draft) {
    CudaTransformerOptions ref_options = draft_options;
    ref_options.fused_step = false;
    CudaTransformer gd_ref(cpu_draft->config(), cpu_draft->weights(), blocks, 16, ref_options);
    report["fused_draft_vs_kernels"] =
        compare_fused_draft(gd, gd_ref, kvd, cases, o.tie_tol, o.logit_tol, o.max_near_ties, ok);
    report["fused_draft_vs_kernels"]["fused_blocks"] = o.fused_blocks;
  }

  // (g) a launched chain (draft-ahead) == the synchronous chain
  report["launched_chain"] = compare_launched_chain(gd, kvd, cases, 5, ok);

  // (g2) a sampled chain (drafts drawn on the device) == the host draw step by step
  report["sampled_chain"] = compare_sampled_chain(gd, kvd, cases, 5, ok);
  report["draft_chain_timing"] = draft_chain_timing(gd, kvd, cases);

  // (h) the qkv GEMM's RoPE + K/V epilogue == the GEMM and qk_norm_rope_kv apart
  if (!o.rope_model_dir.empty()) report["qkv_rope"] = compare_qkv_rope(o.rope_model_dir, cases, o.gpu_options, ok);

  if (o.fused_draft && o.fused_trace) report["fused_trace_cycles"] = fused_trace_cycles(gd, kvd, cases);

  // (d)
  if (o.timing) report["timing"] = golden_timing(gt, kvt, gd, kvd, cases, o.repeat);
}

}  // namespace

int main(int argc, char** argv) {
  GenerateOptions o;
  if (const int rc = parse_generate_options(argc, argv, o); rc != 0) return rc;
  json report;
  bool ok = true;
  // Every mode: run, print the JSON (with the error if it threw), exit 1 unless ok.
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
  if (o.offload_bench_mode)
    return single_report(
        [&] { return offload_bench(o.synthetic, o.context, o.ring_slots, o.pool_tokens, o.seed, o.iters, o.gpu_options); });
  if (o.prefill_bench_mode)
    return single_report(
        [&] { return prefill_bench(o.synthetic, o.context, o.chunk, o.ring_slots, o.pool_tokens, o.seed, o.gpu_options,
                                        o.prefill_ways); });
  if (o.offload_check_mode)
    return single_report([&] {
      return offload_checks(o.target_dir, o.synthetic.empty() ? "qwen3-0.6b" : o.synthetic, o.context, o.seed, o.gpu_options, ok);
    });
  if (!o.synthetic.empty())
    return single_report([&] { return synthetic_bench(o.synthetic, o.context, o.prefill_max, o.seed, o.iters, o.gpu_options, ok); });
  return single_report([&] {
    golden_report(o, report, ok);
    return report;
  });
}
