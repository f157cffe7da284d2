#include "model/cuda/device_weights.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/gemm.h"
#include "model/cuda/model_ops.h"

namespace specpipe::cuda {
namespace {

/// A matrix in its disk dtype -> BF16 bits, round to nearest even (exact for BF16).
void append_bf16(const MatrixWeight& w, std::vector<uint16_t>& out) {
  const size_t count = static_cast<size_t>(w.rows * w.cols);
  const size_t at = out.size();
  out.resize(at + count);
  uint16_t* dst = out.data() + at;
  switch (w.dtype) {
    case DType::bf16:
      std::memcpy(dst, w.data, count * sizeof(uint16_t));
      break;
    case DType::f16: {
      const auto* src = static_cast<const uint16_t*>(w.data);
      for (size_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(f16_to_f32(src[i]));
      break;
    }
    case DType::f32: {
      const auto* src = static_cast<const float*>(w.data);
      for (size_t i = 0; i < count; ++i) dst[i] = f32_to_bf16(src[i]);
      break;
    }
    default:
      fail(ErrorCode::unsupported, "CUDA forward: matrix of dtype {} is not supported", dtype_name(w.dtype));
  }
}

/// SPECPIPE_QKV_ROPE=0 keeps the qkv GEMM and qk_norm_rope_kv apart (A/B timings; read
/// once).
bool qkv_rope_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SPECPIPE_QKV_ROPE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

}  // namespace

size_t upload_weights(TransformerState& d, const ModelConfig& c, const ModelWeights* weights, uint64_t seed,
                      CudaGemm gemm, bool fused_step, bool qkv_rope, cudaStream_t stream, size_t* device_bytes) {
  const int64_t H = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), I = c.intermediate_size, V = c.vocab_size;
  const int64_t qkvd = qd + 2 * kvd;
  size_t step_bytes = 0;
  // Synthetic (weights == nullptr): the matrices are only laid out here (bf_size) and
  // filled on the device below; the small FP32 vectors are built on the host either way.
  if (weights && static_cast<int32_t>(weights->layers.size()) != c.num_layers)
    fail(ErrorCode::invalid_argument, "CUDA forward: {} layers of weights for a config of {}",
         weights->layers.size(), c.num_layers);
  struct RandomFill {
    size_t at;
    int64_t count;
    float scale;
  };
  std::vector<RandomFill> fills;
  size_t bf_size = 0;
  std::vector<uint16_t> bf;
  std::vector<float> f32;
  struct Offsets {
    size_t qkv, o, gate_up, down;
    int64_t qkv_bias = -1, o_bias = -1, gate_up_bias = -1, down_bias = -1, input_norm, post_norm, q_norm = -1,
            k_norm = -1;
  };
  std::vector<Offsets> offsets;
  auto push_f32 = [&](const std::vector<float>& v) {
    const auto at = static_cast<int64_t>(f32.size());
    f32.insert(f32.end(), v.begin(), v.end());
    f32.resize(align_up(f32.size(), 4));  // 16-byte aligned vectors
    return at;
  };
  auto pad_bf = [&] {  // 128-byte aligned matrices
    bf_size = align_up(bf_size, 64);
    if (weights) bf.resize(bf_size);
  };
  const ModelWeights* mw = weights;
  // (mma's widths are multiples of 32, so intermediate % 8 == 0 as the kernel needs)
  d.gate_up_silu = gemm == CudaGemm::mma && !fused_step &&
                   (mw ? std::all_of(mw->layers.begin(), mw->layers.end(),
                                     [](const LayerWeights& l) { return l.gate_bias.empty() && l.up_bias.empty(); })
                       : !c.mlp_bias);
  // gemm_mma_rope_kv_bf16's conditions (CudaTransformerOptions::qkv_rope).
  const bool no_qkv_bias = mw ? std::all_of(mw->layers.begin(), mw->layers.end(),
                                            [](const LayerWeights& l) {
                                              return l.q_bias.empty() && l.k_bias.empty() && l.v_bias.empty();
                                            })
                              : !c.attention_bias;
  d.qkv_rope = qkv_rope && qkv_rope_enabled() && gemm == CudaGemm::mma && !fused_step && !c.qk_norm &&
               d.kv_dtype == DType::f32 && c.head_dim % 16 == 0 && no_qkv_bias;
  // One matrix (or several stacked: q|k|v, gate|up) of rows x cols; host parts or random.
  auto add_matrix = [&](std::initializer_list<const MatrixWeight*> parts, int64_t rows, int64_t cols) {
    const size_t at = bf_size;
    if (weights) {
      for (const MatrixWeight* w : parts) append_bf16(*w, bf);
      bf_size = bf.size();
    } else {
      fills.push_back({at, rows * cols, 1.0f / std::sqrt(static_cast<float>(cols))});
      bf_size += static_cast<size_t>(rows * cols);
    }
    pad_bf();
    return at;
  };
  const size_t embed_off = add_matrix({mw ? &mw->embed_tokens : nullptr}, V, H);
  size_t head_off = embed_off;
  if (mw ? mw->lm_head.data != mw->embed_tokens.data : !c.tie_word_embeddings)
    head_off = add_matrix({mw ? &mw->lm_head : nullptr}, V, H);
  const std::vector<float> ones_h(static_cast<size_t>(H), 1.0f), ones_hd(static_cast<size_t>(c.head_dim), 1.0f);
  for (int32_t li = 0; li < c.num_layers; ++li) {
    Offsets o{};
    if (!mw) {
      o.qkv = add_matrix({}, qkvd, H);
      o.o = add_matrix({}, H, qd);
      o.gate_up = add_matrix({}, 2 * I, H);
      o.down = add_matrix({}, H, I);
      step_bytes += static_cast<size_t>(qkvd * H + H * qd + 2 * I * H + H * I) * sizeof(uint16_t);
      if (c.attention_bias) o.qkv_bias = push_f32(std::vector<float>(static_cast<size_t>(qkvd), 0.0f));
      if (c.o_proj_bias) o.o_bias = push_f32(std::vector<float>(static_cast<size_t>(H), 0.0f));
      if (c.mlp_bias) {
        o.gate_up_bias = push_f32(std::vector<float>(static_cast<size_t>(2 * I), 0.0f));
        o.down_bias = push_f32(std::vector<float>(static_cast<size_t>(H), 0.0f));
      }
      o.input_norm = push_f32(ones_h);
      o.post_norm = push_f32(ones_h);
      if (c.qk_norm) {
        o.q_norm = push_f32(ones_hd);
        o.k_norm = push_f32(ones_hd);
      }
      offsets.push_back(o);
      continue;
    }
    const LayerWeights& l = mw->layers[static_cast<size_t>(li)];
    const size_t before = bf_size;
    o.qkv = add_matrix({&l.q_proj, &l.k_proj, &l.v_proj}, qkvd, H);
    if (d.qkv_rope) {  // gemm_mma_rope_kv_bf16's layout
      const std::vector<uint16_t> stacked(bf.begin() + static_cast<std::ptrdiff_t>(o.qkv),
                                          bf.begin() + static_cast<std::ptrdiff_t>(o.qkv + qkvd * H));
      interleave_rope_halves(stacked.data(), qd, kvd, c.head_dim, H, bf.data() + o.qkv);
    }
    o.o = add_matrix({&l.o_proj}, H, qd);
    o.gate_up = add_matrix({&l.gate_proj, &l.up_proj}, 2 * I, H);
    if (d.gate_up_silu) {  // gemm_mma_silu_bf16's layout
      const std::vector<uint16_t> stacked(bf.begin() + static_cast<std::ptrdiff_t>(o.gate_up),
                                          bf.begin() + static_cast<std::ptrdiff_t>(o.gate_up + 2 * I * H));
      interleave_gate_up(stacked.data(), I, H, bf.data() + o.gate_up);
    }
    o.down = add_matrix({&l.down_proj}, H, I);
    step_bytes += (bf_size - before) * sizeof(uint16_t);
    if (!l.q_bias.empty() || !l.k_bias.empty() || !l.v_bias.empty()) {
      std::vector<float> b(static_cast<size_t>(qkvd), 0.0f);
      std::copy(l.q_bias.begin(), l.q_bias.end(), b.begin());
      std::copy(l.k_bias.begin(), l.k_bias.end(), b.begin() + qd);
      std::copy(l.v_bias.begin(), l.v_bias.end(), b.begin() + qd + kvd);
      o.qkv_bias = push_f32(b);
    }
    if (!l.o_bias.empty()) o.o_bias = push_f32(l.o_bias);
    if (!l.gate_bias.empty() || !l.up_bias.empty()) {
      std::vector<float> b(static_cast<size_t>(2 * I), 0.0f);
      std::copy(l.gate_bias.begin(), l.gate_bias.end(), b.begin());
      std::copy(l.up_bias.begin(), l.up_bias.end(), b.begin() + I);
      o.gate_up_bias = push_f32(b);
    }
    if (!l.down_bias.empty()) o.down_bias = push_f32(l.down_bias);
    o.input_norm = push_f32(l.input_norm);
    o.post_norm = push_f32(l.post_attention_norm);
    if (c.qk_norm) {
      o.q_norm = push_f32(l.q_norm);
      o.k_norm = push_f32(l.k_norm);
    }
    offsets.push_back(o);
  }
  const int64_t final_off = push_f32(mw ? mw->final_norm : ones_h);
  step_bytes += static_cast<size_t>(V * H) * sizeof(uint16_t);  // lm_head
  d.weights_bf16.allocate(bf_size * sizeof(uint16_t), device_bytes);
  d.weights_f32.allocate(f32.size() * sizeof(float), device_bytes);
  if (mw) {
    cuda_try(cudaMemcpy(d.weights_bf16.as<void>(), bf.data(), bf.size() * sizeof(uint16_t), cudaMemcpyHostToDevice),
             "weight upload");
  } else {
    cuda_try(cudaMemsetAsync(d.weights_bf16.as<void>(), 0, d.weights_bf16.bytes(), stream), "weight memset");
    uint64_t k = 0;
    for (const RandomFill& f : fills)
      cuda_try(fill_uniform_bf16(d.weights_bf16.as<uint16_t>() + f.at, f.count,
                                 seed * 0x100000001B3ull + (++k) * 0x9E3779B97F4A7C15ull, f.scale, stream),
               "random weights");
    cuda_try(cudaStreamSynchronize(stream), "random weights");
  }
  cuda_try(cudaMemcpy(d.weights_f32.as<void>(), f32.data(), f32.size() * sizeof(float), cudaMemcpyHostToDevice),
           "weight upload");
  uint16_t* wb = d.weights_bf16.as<uint16_t>();
  float* wf = d.weights_f32.as<float>();
  auto fp = [&](int64_t off) { return off < 0 ? nullptr : wf + off; };
  d.embed = wb + embed_off;
  d.lm_head = wb + head_off;
  d.final_norm = wf + final_off;
  for (const Offsets& o : offsets)
    d.layers.push_back({wb + o.qkv, wb + o.o, wb + o.gate_up, wb + o.down, fp(o.qkv_bias), fp(o.o_bias),
                        fp(o.gate_up_bias), fp(o.down_bias), fp(o.input_norm), fp(o.post_norm), fp(o.q_norm),
                        fp(o.k_norm)});
  return step_bytes;
}

}  // namespace specpipe::cuda
