#pragma once
/// The architecture hyper-parameters of a checkpoint, parsed once from its config.json.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/rope.h"

namespace specpipe {

/// Decoder-only families the forward pass implements. They differ only in flags below:
/// llama (no QK-norm, optional attention/mlp bias), qwen2 (q/k/v bias), qwen3 (QK-norm).
enum class ModelFamily { llama, qwen2, qwen3 };

struct ModelConfig {
  ModelFamily family = ModelFamily::llama;
  std::string model_type;  ///< as spelled in config.json
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_layers = 0;
  int32_t num_heads = 0;     ///< query heads
  int32_t num_kv_heads = 0;  ///< key/value heads (GQA: num_heads % num_kv_heads == 0)
  int32_t head_dim = 0;      ///< `head_dim` if given, else hidden_size / num_heads
  int32_t max_position_embeddings = 0;
  double rope_theta = 10000.0;  ///< `rope_theta` or `rope_parameters.rope_theta`
  /// `rope_scaling` (or `rope_parameters`): linear, llama3 or yarn frequency scaling.
  cpu::RopeScaling rope_scaling;
  float rms_norm_eps = 1e-6f;
  bool tie_word_embeddings = false;
  bool qk_norm = false;         ///< RMSNorm over head_dim on q and k before RoPE (qwen3)
  bool attention_bias = false;  ///< q/k/v projections carry a bias (qwen2 always)
  bool o_proj_bias = false;     ///< o_proj bias: llama/qwen3 with attention_bias, never qwen2
  bool mlp_bias = false;        ///< gate/up/down carry a bias (llama `mlp_bias` only)
  /// `eos_token_id` of config.json, then those of generation_config.json not already
  /// listed (generation_config.json often adds the chat end-of-turn token). May be empty.
  std::vector<int32_t> eos_token_ids;
  DType weight_dtype = DType::f32;     ///< `dtype` / `torch_dtype`, informative only

  /// Parses `<model_dir>/config.json` (and `generation_config.json` for EOS when present).
  /// Required keys: model_type, vocab_size, hidden_size, intermediate_size,
  /// num_hidden_layers, num_attention_heads. The others take the transformers default of
  /// the family when absent or null (num_key_value_heads: llama = num_attention_heads,
  /// qwen2/qwen3 = 32; head_dim: qwen3 = 128, else hidden_size / num_attention_heads;
  /// max_position_embeddings: llama 2048, qwen 32768; rope_theta 10000; rms_norm_eps 1e-6).
  /// Throws Error naming the file and key: not_found (file or required key missing),
  /// unsupported (unknown model_type, RoPE types other than default / linear / llama3 /
  /// yarn, sliding window, non-SiLU activation,
  /// quantization), invalid_argument (wrong type, out of range, above the size limits of
  /// config.cpp's kSizeLimits / RoPE table / parameter budget, or inconsistent sizes),
  /// corrupt_file (not well-formed JSON).
  static ModelConfig from_dir(const std::filesystem::path& model_dir);

  int64_t q_dim() const { return int64_t{num_heads} * head_dim; }
  int64_t kv_dim() const { return int64_t{num_kv_heads} * head_dim; }
};

const char* to_string(ModelFamily family);

}  // namespace specpipe
