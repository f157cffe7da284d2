#pragma once
/// The demo pair's runs on the GPU that specpipe_gpu_generate's checks and timings share:
/// plain greedy decoding, greedy draft-model speculation (the engine's round protocol),
/// the CPU Transformer's last logits, and two small comparisons of logits.
#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"
#include "model/transformer.h"

namespace specpipe::gpu_tool {

struct PlainRun {
  std::vector<int32_t> tokens;
  std::vector<float> first_logits;  // after the prompt (when kept)
  std::vector<double> gap_at;       // |logit(chosen) - logit(reference)| where they differ
  double prefill_ms = 0, decode_ms = 0;
};

/// Plain greedy decoding on the GPU. `want` (may be empty): reference tokens; at the first
/// position where ours differs, the gap between the two tokens' logits is recorded.
/// `step_logits` (when given) gets every step's logits row appended.
PlainRun gpu_plain(CudaTransformer& m, KvStore& kv, const std::vector<int32_t>& prompt, int32_t max_new,
                   const std::vector<int32_t>& want, bool keep_logits, std::vector<float>* step_logits = nullptr);

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
                 const std::vector<int32_t>& prompt, int32_t max_new, int32_t gamma, bool chain = true);

/// The CPU Transformer's last-position logits after `prompt` (chunked prefill).
std::vector<float> cpu_last_logits(Transformer& m, const std::vector<int32_t>& prompt);

/// The largest |a[i] - b[i]| over the shorter length.
double max_abs_diff(std::span<const float> a, std::span<const float> b);

/// The index of the largest element (the first of equals).
int32_t argmax_of(const std::vector<float>& v);

}  // namespace specpipe::gpu_tool
