#pragma once
/// The weights of a model as the forward pass uses them: large matrices in their disk
/// dtype, used in place from the memory map; small vectors (norms, biases) as float32.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace specpipe {

class SafetensorsArchive;

/// A row-major [rows, cols] matrix = a torch Linear weight [out_features, in_features].
struct MatrixWeight {
  DType dtype = DType::f32;
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t bytes() const { return static_cast<size_t>(rows * cols) * dtype_size(dtype); }
};

struct LayerWeights {
  MatrixWeight q_proj, k_proj, v_proj, o_proj;  ///< [q_dim|kv_dim|kv_dim, hidden], [hidden, q_dim]
  MatrixWeight gate_proj, up_proj, down_proj;   ///< [inter, hidden] x2, [hidden, inter]
  std::vector<float> q_bias, k_bias, v_bias;    ///< empty unless config.attention_bias
  std::vector<float> o_bias;                    ///< empty unless config.attention_bias (llama)
  std::vector<float> gate_bias, up_bias, down_bias;  ///< empty unless config.mlp_bias
  std::vector<float> input_norm;                ///< [hidden]
  std::vector<float> post_attention_norm;       ///< [hidden]
  std::vector<float> q_norm, k_norm;            ///< [head_dim], empty unless config.qk_norm
};

struct ModelWeights {
  MatrixWeight embed_tokens;  ///< [vocab, hidden]
  MatrixWeight lm_head;       ///< [vocab, hidden]; same storage as embed_tokens when tied
  std::vector<float> final_norm;
  std::vector<LayerWeights> layers;
  /// Keeps whatever `data` pointers point into alive (a mapped archive, or owned memory).
  std::shared_ptr<const void> storage;

  /// Bytes of matrix weights one decode step reads (every layer + lm_head).
  size_t bytes_read_per_token() const;
};

/// Maps the tensors of a Hugging Face checkpoint onto ModelWeights, checking that every
/// expected tensor is present with the dtype family and shape the config implies.
/// Throws Error naming the tensor: not_found (missing), corrupt_file (shape mismatch),
/// unsupported (dtype other than F32/F16/BF16).
ModelWeights load_weights(const ModelConfig& config,
                          std::shared_ptr<const SafetensorsArchive> archive);

}  // namespace specpipe
