#pragma once
/// specpipe_gpu_generate's checks of the demo pair on the GPU against the golden data
/// (tests/data/golden-public.json cases), the CPU Transformer and itself. Each returns
/// its part of the report and clears `ok` where a check fails.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstore/kv_store.h"
#include "model/cuda/cuda_transformer.h"
#include "model/transformer.h"

namespace specpipe::gpu_tool {

/// (a) + (b): plain greedy decoding of every case == its target_greedy_96 (a divergence
/// with a logit gap under tie_tol is a near-tie, at most max_near_ties of them), and the
/// last-prompt-position logits vs the CPU Transformer's (within logit_tol) and the
/// reference's where the case has them. `plain_out` / `plain_matches` get each case's
/// tokens and whether they equal the golden ones.
nlohmann::json check_plain(CudaTransformer& gt, KvStore& kvt, Transformer& cpu_target, const nlohmann::json& cases,
                           double tie_tol, double logit_tol, int max_near_ties,
                           std::vector<std::vector<int32_t>>& plain_out, std::vector<bool>& plain_matches, bool& ok);

/// (c): speculation with the draft for gamma 1..8: the output == the plain output
/// (fatal), accepted count per round == the case's spec.<gamma> where present and the
/// plain run matched the golden tokens (reported, not fatal).
nlohmann::json check_spec(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd,
                          const nlohmann::json& cases, const std::vector<std::vector<int32_t>>& plain_out,
                          const std::vector<bool>& plain_matches, bool& ok);

/// (e): every case's plain run with graphs off and on: bitwise-identical logits at every
/// step and the same tokens; speculation (gamma 5) the same tokens and accepted counts,
/// also with the drafts made one forward per token instead of one greedy chain. Leaves
/// graphs on in both models.
nlohmann::json check_graphs_vs_eager(CudaTransformer& gt, KvStore& kvt, CudaTransformer& gd, KvStore& kvd,
                                     const nlohmann::json& cases, bool& ok);

/// (h) The qkv GEMM's RoPE + K/V epilogue (CudaTransformerOptions::qkv_rope) against the
/// qkv GEMM and qk_norm_rope_kv apart, on the Llama-shaped model in `model_dir`: plain
/// greedy decoding of every case's prompt (its ids mod the vocabulary), eager and graphed,
/// logits bitwise equal at every step. Clears `ok` on any difference, or where the
/// epilogue does not serve the model (unless SPECPIPE_QKV_ROPE=0 turned it off).
nlohmann::json compare_qkv_rope(const std::string& model_dir, const nlohmann::json& cases,
                                const CudaTransformerOptions& options, bool& ok);

/// (f): the fused draft step (`fused`) against the per-kernel draft forward (`kernels`): plain
/// greedy draft decoding of every case on both; the logits at each step up to the first
/// token that differs, and that token's margin (a difference is allowed only at a
/// near-tie, gap < tie_tol). Clears `ok` on a mismatch, more than max_near_ties near-ties
/// or logits further than logit_tol.
nlohmann::json compare_fused_draft(CudaTransformer& fused, CudaTransformer& kernels, KvStore& kv,
                                   const nlohmann::json& cases, double tie_tol, double logit_tol, int max_near_ties,
                                   bool& ok);

/// The draft-ahead path of the model (launch_greedy_chain / collect_greedy_chain) against
/// forward_greedy_chain: for the first cases, a chain of `steps` after the prompt, run
/// three times on one sequence (nothing is committed, so each run starts at the same
/// position and writes the same K/V): synchronously, launched then collected, and launched
/// with a forward in between (which must wait for the chain and keep its ids for
/// collect). Clears `ok` on any difference.
nlohmann::json compare_launched_chain(CudaTransformer& m, KvStore& kv, const nlohmann::json& cases, int32_t steps,
                                      bool& ok);

/// A sampled chain on the device (CudaTransformer::forward_sampled_chain) against the same
/// model's step-by-step path with the draw on the host (forward() with its logits rows,
/// cpu::sampling_distribution and cpu::sample_from with the same uniforms): for pairs of
/// the first cases, one chain of `steps` with a sampled window (temperature 0.8) and a
/// greedy one, three times with fresh uniforms (graph replays must read them). The same
/// tokens (a draw may differ only where its uniform lands within rounding of a boundary
/// of the cumulative distribution: none expected in so few), q rows within 1e-6
/// relative. Clears `ok` on a token or q difference.
nlohmann::json compare_sampled_chain(CudaTransformer& m, KvStore& kv, const nlohmann::json& cases, int32_t steps,
                                     bool& ok);

/// The fused kernel's phases (SM clock cycles of block 0 between barriers) in a draft
/// decode step after case 0's prompt (20 steps; the model built with fused_trace).
nlohmann::json fused_trace_cycles(CudaTransformer& gd, KvStore& kvd, const nlohmann::json& cases);

}  // namespace specpipe::gpu_tool
