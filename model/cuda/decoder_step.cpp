#include "model/cuda/decoder_step.h"

#include <cmath>

#include "core/dtype.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/sampling.h"
#include "model/cuda/key_summaries.h"
#include "model/cuda/model_ops.h"

namespace specpipe::cuda {
namespace {

/// y[0:m] = x W^T through the chosen batch-invariant GEMM; x is [m, k] bf16, dense.
void run_gemm(CudaGemm kind, const LtGemm& lt, const uint16_t* xb, const uint16_t* w, float* y, int32_t m, int64_t n,
              int64_t k, const char* what, cudaStream_t st) {
  switch (kind) {
    case CudaGemm::rows: cuda_try(gemm_rows_bf16(xb, k, w, n, k, y, n, m, st), what); break;
    // With programmatic dependent launch: the weights stream in while the kernel before ends.
    case CudaGemm::mma: cuda_try(gemm_mma_bf16(xb, k, w, n, k, y, n, m, st, true), what); break;
    case CudaGemm::automatic:  // resolved by the constructor; never here
    case CudaGemm::cublaslt: lt_try(lt.run(xb, w, y, m, st), what); break;
  }
}

}  // namespace

void enqueue_embedding(const TransformerState& d, const ModelConfig& c, const StepMeta& m, LayerRows rows,
                       cudaStream_t st) {
  const int64_t H = c.hidden_size;
  if (c.num_layers > 0)
    cuda_try(embedding_rms_norm_bf16(DType::bf16, d.embed, H, m.tokens, m.total, rows.x, H, d.layers[0].input_norm,
                                     c.rms_norm_eps, rows.xb, H, st),
             "embedding + input norm");
  else
    cuda_try(embedding(DType::bf16, d.embed, H, m.tokens, m.total, rows.x, H, st), "embedding");
}

void enqueue_decoder_layer(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                           int32_t l, LayerRows rows, DeviceRingSlot dense, cudaStream_t st) {
  const int64_t H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), I = c.intermediate_size;
  const int64_t qkvd = qd + 2 * kvd;
  const float eps = c.rms_norm_eps;
  const bool skip_rest = s.skip.rest, skip_attention = s.skip.attention, skip_gemms = s.skip.gemms;
  const bool bf16_kv = d.kv_dtype == DType::bf16;
  const int32_t rows_total = m.total;
  const AttentionShape shape{c.num_heads, c.num_kv_heads, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  const TransformerState::Layer& w = d.layers[static_cast<size_t>(l)];
  // attention block (the input norm of layer l > 0 ran with the previous residual)
  float* q = d.qkv;
  float* k = d.qkv + qd;
  float* v = d.qkv + qd + kvd;
  // The window's K/V rows go to their pool slots, in a staged round to the staging
  // buffer, in a layer-wise prefill to the dense slot (the window's attention reads them
  // from qkv either way).
  auto* dense_k = static_cast<float*>(const_cast<void*>(dense.k));
  auto* dense_v = static_cast<float*>(const_cast<void*>(dense.v));
  float* rows_k = s.stage ? d.stage_rows(l, false, s.max_tokens, kvd) : d.pool_k[static_cast<size_t>(l)];
  float* rows_v = s.stage ? d.stage_rows(l, true, s.max_tokens, kvd) : d.pool_v[static_cast<size_t>(l)];
  if (dense_k) {
    rows_k = dense_k;
    rows_v = dense_v;
  }
  // A BF16 store: the window's K/V also go, rounded, to the dense BF16 rows the
  // attention reads, so a key gives the same floats from the window as from the pool.
  uint16_t* dense_rows = bf16_kv ? d.kv_dense.as<uint16_t>() : nullptr;
  if (d.qkv_rope && !skip_gemms) {
    // RoPE and the K/V scatter in the qkv GEMM's epilogue (its weights laid out for it;
    // bitwise the GEMM and qk_norm_rope_kv below). Offload write-back: a pool block this
    // forward reuses is written only after the ring's job has copied this layer of it to
    // the host (an event; device_ring.h).
    if (s.ring) s.ring->before_write(l);
    const QkvRope rope{d.rope_cos, d.rope_sin, m.pos, m.slots, rows_k, rows_v, kvd, static_cast<int32_t>(qd),
                       static_cast<int32_t>(kvd), c.head_dim};
    cuda_try(gemm_mma_rope_kv_bf16(rows.xb, H, w.qkv, H, d.qkv, qkvd, rows_total, rope, st, true),
             "qkv GEMM + rope, kv scatter");
  } else {
    if (!skip_gemms) run_gemm(s.gemm, d.g_qkv, rows.xb, w.qkv, d.qkv, rows_total, qkvd, H, "qkv GEMM", st);
    if (w.qkv_bias) cuda_try(add_bias(d.qkv, qkvd, w.qkv_bias, rows_total, qkvd, st), "qkv bias");
    if (s.ring) s.ring->before_write(l);  // as above
    if (!skip_rest && bf16_kv)
      cuda_try(qk_norm_rope_kv_bf16(q, k, v, qkvd, c.num_heads, c.num_kv_heads, c.head_dim,
                                    c.qk_norm ? w.q_norm : nullptr, c.qk_norm ? w.k_norm : nullptr, eps, d.rope_cos,
                                    d.rope_sin, m.pos, m.slots, rows_total, rows_k, rows_v, /*rows_f32=*/s.stage, kvd,
                                    dense_rows, dense_rows + kvd, 2 * kvd, st),
               "qk norm, rope, kv scatter (bf16)");
    else if (!skip_rest)
      cuda_try(qk_norm_rope_kv(q, k, v, qkvd, c.num_heads, c.num_kv_heads, c.head_dim, c.qk_norm ? w.q_norm : nullptr,
                               c.qk_norm ? w.k_norm : nullptr, eps, d.rope_cos, d.rope_sin, m.pos, m.slots, rows_total,
                               rows_k, rows_v, kvd, st),
               "qk norm, rope, kv scatter");
  }
  // Offload: the stream waits for this layer's ring slot as late as it can (the GEMM
  // above overlapped its load), and the slot's next load follows the attention. A
  // layer-wise prefill reads its prefix from the dense slot it writes.
  const DeviceRingSlot ring = dense.k ? dense : s.ring ? s.ring->acquire(l) : DeviceRingSlot{nullptr, nullptr};
  // SpecPV: this layer's partial views (its own windows and block tables).
  const unsigned char* lm = s.layer_meta ? s.layer_meta + static_cast<size_t>(l) * s.layer_stride : nullptr;
  const auto* win = lm ? reinterpret_cast<const AttentionWindowDesc*>(lm) : m.win;
  const auto* bt = lm ? reinterpret_cast<const int32_t*>(lm + s.layer_tables) : m.bt;
  for (int32_t t = 0; t < s.num_query_copies; ++t) {
    const QueryCopy& qc = s.query_copies[t];
    if (qc.pos) {
      cuda_try(quest_query_sums(q + int64_t{qc.first_row} * qkvd, 0, qc.n, qkvd, c.num_heads, c.num_kv_heads, c.head_dim,
                                1, qc.pos + int64_t{l} * kvd, qc.neg + int64_t{l} * kvd, st),
               "query sums");
      continue;
    }
    cuda_try(cudaMemcpy2DAsync(qc.host + int64_t{l} * qc.n * qd, qd * sizeof(float), q + qc.first_row * qkvd,
                               qkvd * sizeof(float), qd * sizeof(float), qc.n, cudaMemcpyDeviceToHost, st),
             "query rows to the host");
  }
  const PagedPool pool{d.pool_k[static_cast<size_t>(l)], d.pool_v[static_cast<size_t>(l)], kvd, d.block_size, bt,
                       ring.k, ring.v, d.kv_dtype};
  const AttentionBatch batch{q,    bf16_kv ? static_cast<const void*>(dense_rows) : k,
                             bf16_kv ? static_cast<const void*>(dense_rows + kvd) : v,
                             d.attn, qkvd, bf16_kv ? 2 * kvd : qkvd, qd, win, m.tw, rows_total,
                             s.max_chunks, d.workspace.as<float>(), d.attention_counters.as<uint32_t>(),
                             m.min_window_rows, m.prefix_settled};
  if (!skip_rest && !skip_attention) cuda_try(attention_bf16(shape, pool, batch, d.xb, st), "attention");
  // SpecPV refresh by attention mass: the window's mass per prefix block, from the same
  // keys (the ring slot still held), after the attention and apart from it.
  for (int32_t t = 0; t < s.num_query_copies; ++t) {
    const QueryCopy& qc = s.query_copies[t];
    if (!qc.mass || skip_rest) continue;
    const BlockMassArgs a{q + int64_t{qc.first_row} * qkvd, qkvd, k + int64_t{qc.first_row} * qkvd, qkvd,
                          d.pool_k[static_cast<size_t>(l)], static_cast<const float*>(ring.k), kvd, d.block_size,
                          bt + qc.table_offset[l], qc.prefix_len, qc.n, c.num_heads, c.num_kv_heads, c.head_dim,
                          shape.scale};
    float* mass = qc.mass + int64_t{l} * qc.blocks;
    cuda_try(attention_block_mass(a, qc.lse, mass, st), "attention block mass");
    cuda_try(cudaMemcpyAsync(qc.mass_host + int64_t{l} * qc.blocks, mass, static_cast<size_t>(qc.blocks) * sizeof(float),
                             cudaMemcpyDeviceToHost, st),
             "block mass to the host");
  }
  if (s.ring && !dense.k) s.ring->release(l);
  if (!skip_gemms) run_gemm(s.gemm, d.g_o, d.xb, w.o, d.tmp, rows_total, H, qd, "o_proj GEMM", st);
  // MLP block
  if (!skip_rest)
    cuda_try(residual_rms_norm_bf16(rows.x, d.tmp, w.o_bias, H, w.post_norm, eps, rows_total, H, d.xb, H, st),
             "residual + post-attention norm");
  // The fused SiLU gate's BF16 output [rows, I] lives in gu's memory (unused then); the
  // unfused gate writes xb, as it reads gu.
  uint16_t* act = d.gate_up_silu ? reinterpret_cast<uint16_t*>(d.gu) : d.xb;
  if (d.gate_up_silu) {
    if (!skip_gemms)
      cuda_try(gemm_mma_silu_bf16(d.xb, H, w.gate_up, I, H, act, I, rows_total, st, true), "gate_up GEMM + SiLU gate");
  } else {
    if (!skip_gemms) run_gemm(s.gemm, d.g_gate_up, d.xb, w.gate_up, d.gu, rows_total, 2 * I, H, "gate_up GEMM", st);
    if (w.gate_up_bias) cuda_try(add_bias(d.gu, 2 * I, w.gate_up_bias, rows_total, 2 * I, st), "gate_up bias");
    if (!skip_rest) cuda_try(silu_gate_bf16(d.gu, d.gu + I, 2 * I, rows_total, I, act, I, st), "silu gate");
  }
  if (!skip_gemms) run_gemm(s.gemm, d.g_down, act, w.down, d.tmp, rows_total, H, I, "down_proj GEMM", st);
  if (skip_rest) return;
  if (l + 1 < c.num_layers)
    cuda_try(residual_rms_norm_bf16(rows.x, d.tmp, w.down_bias, H, d.layers[static_cast<size_t>(l) + 1].input_norm, eps,
                                    rows_total, H, rows.xb, H, st),
             "residual + input norm");
  else
    cuda_try(residual_add(rows.x, d.tmp, w.down_bias, rows_total, H, H, st), "residual");
}

void enqueue_head(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                  const float* x, cudaStream_t st) {
  if (m.logit_rows == 0) return;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const bool skip_rest = s.skip.rest, skip_gemms = s.skip.gemms;
  // Every row wants logits (decode steps, chain steps, verify windows): the rows are
  // in place and the gather, a copy, is left out.
  const bool all_rows = m.logit_rows == m.total;
  if (!skip_rest && !all_rows) cuda_try(gather_rows(x, m.lr, m.logit_rows, H, H, d.h, st), "gather");
  if (!skip_rest)
    cuda_try(rms_norm_bf16(all_rows ? x : d.h, H, d.final_norm, c.rms_norm_eps, m.logit_rows, H, d.xb, H, st),
             "final norm");
  if (!skip_gemms) run_gemm(s.gemm, d.g_head, d.xb, d.lm_head, d.logits, m.logit_rows, V, H, "lm_head GEMM", st);
  if (!skip_rest) cuda_try(argmax(d.logits, m.logit_rows, V, V, m.argmax, st), "argmax");
}

void enqueue_decoder_step(const TransformerState& d, const ModelConfig& c, const StepSettings& s, const StepMeta& m,
                          cudaStream_t st) {
  // A sampled chain's step draws from the logits rows after the argmax.
  auto sample = [&] {
    if (m.sample_u && m.logit_rows > 0)
      cuda_try(sample_chain_rows(d.logits, c.vocab_size, m.logit_rows, c.vocab_size, m.sample_inv_t, m.sample_u,
                                 m.sample_q, c.vocab_size, m.argmax, st),
               "chain sampling");
  };
  if (s.fused && m.total <= kFusedMaxRows) {
    const FusedStep step{m.tokens, m.pos, m.slots, m.tw, m.win, m.bt, m.lr, m.total, m.logit_rows,
                         s.copy_logits || m.sample_u ? d.logits : nullptr, m.argmax};
    cuda_try(fused_step(d.fused, step, d.fused_sc, d.fused_blocks, st), "fused step");
    sample();
    return;
  }
  // Fused row kernels (kernels/cuda/elementwise.h): bitwise the unfused sequence
  // embedding, norm, cast / q-k norm, RoPE, KV scatter / attention, cast / residual, next
  // norm, cast / SiLU gate, cast. Per layer besides the GEMMs: q-k norm + RoPE + KV
  // unless the qkv GEMM does it (qkv_rope), attention (one launch with the counters), two
  // residual + norm, and the SiLU gate unless the gate_up GEMM writes it (gate_up_silu).
  const LayerRows rows{d.x, d.xb};
  if (!s.skip.rest) enqueue_embedding(d, c, m, rows, st);
  for (int32_t l = 0; l < c.num_layers; ++l) enqueue_decoder_layer(d, c, s, m, l, rows, {nullptr, nullptr}, st);
  // final norm and LM head for the rows that need logits
  enqueue_head(d, c, s, m, d.x, st);
  sample();
}

}  // namespace specpipe::cuda
