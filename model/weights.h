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
  std::vector<float> q_bias, k_bias, v_bias;    ///< [q_dim|kv_dim|kv_dim]; empty unless
                                                ///< config.attention_bias
  std::vector<float> o_bias;                    ///< [hidden], empty unless config.o_proj_bias
  std::vector<float> gate_bias, up_bias, down_bias;  ///< [inter] x2, [hidden]; empty unless
                                                     ///< config.mlp_bias
  std::vector<float> input_norm;                ///< [hidden]
  std::vector<float> post_attention_norm;       ///< [hidden]
  std::vector<float> q_norm, k_norm;            ///< [head_dim], empty unless config.qk_norm
};

struct ModelWeights {
  MatrixWeight embed_tokens;  ///< [vocab, hidden]
  /// [vocab, hidden]. When config.tie_word_embeddings it is a copy of embed_tokens (same
  /// `data` pointer, no second tensor); test `lm_head.data == embed_tokens.data`.
  MatrixWeight lm_head;
  std::vector<float> final_norm;  ///< [hidden]
  std::vector<LayerWeights> layers;
  /// Keeps whatever `data` pointers point into alive: the SafetensorsArchive itself, or
  /// (only when some tensor's bytes were not aligned to its element size in the file, so
  /// it had to be copied) a holder of the archive and those copies. Opaque to users.
  std::shared_ptr<const void> storage;

  /// Bytes of matrix weights one decode step reads: every layer's seven projections plus
  /// lm_head (the embedding row, norms and biases are negligible and not counted).
  size_t bytes_read_per_token() const;
};

/// Maps the tensors of a Hugging Face checkpoint onto ModelWeights, checking that every
/// expected tensor is present with the dtype family and shape the config implies.
/// Matrices point into the archive's map (copied only if misaligned); vectors become
/// float32. Tensors the model does not use (rotary inv_freq, a tied lm_head.weight) are
/// accepted with a warning. Throws Error naming the tensor: not_found (missing, with the
/// checkpoint dir), corrupt_file (shape mismatch, with the file), unsupported (dtype other
/// than F32/F16/BF16), invalid_argument (null archive).
ModelWeights load_weights(const ModelConfig& config,
                          std::shared_ptr<const SafetensorsArchive> archive);

}  // namespace specpipe
