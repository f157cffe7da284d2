#pragma once
/// Rotary position embedding, "rotate half" layout (Llama/Qwen in Hugging Face):
/// for i < d/2, (x[i], x[i + d/2]) is rotated by angle pos * inv_freq[i], and cos / sin
/// are multiplied by an attention factor (1 but for YaRN).
///
/// The frequencies follow Hugging Face's initialisers (transformers'
/// modeling_rope_utils: default, linear, llama3, yarn) step by step in float32, the
/// precision they compute in, so that positions far into a long context round as in the
/// reference (tests/kernels/rope_scaling_test.cpp compares with values transformers
/// itself produced, tests/data/rope-scaling-hf.json).
#include <cstdint>
#include <vector>

namespace specpipe::cpu {

/// How config.json scales the frequencies for contexts past the trained length
/// (`rope_scaling` or `rope_parameters`; model/config.cpp parses and checks it).
struct RopeScaling {
  enum class Type { none, linear, llama3, yarn };
  Type type = Type::none;
  double factor = 1.0;  ///< linear, llama3, yarn
  /// llama3: frequencies whose wavelength is past original / low_freq_factor are divided
  /// by factor, those under original / high_freq_factor kept, the band between blended.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  /// llama3, yarn: the context the model was trained at (yarn: 0 = max_position_embeddings).
  int32_t original_max_positions = 0;
  /// yarn: the ramp between interpolated and extrapolated frequencies runs between the
  /// dimensions that turn beta_fast and beta_slow times over the original context.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  bool truncate = true;  ///< yarn: the ramp's ends rounded to whole dimensions
  /// yarn: cos / sin multiplied by this; <= 0 = derived from factor (and mscale /
  /// mscale_all_dim when both are > 0), as Hugging Face does.
  double attention_factor = 0.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
};

const char* to_string(RopeScaling::Type type);

/// inv_freq[i] for i < head_dim / 2 (float32, as Hugging Face's initialisers compute it).
/// `max_positions` is the model's max_position_embeddings (yarn reads it).
std::vector<float> rope_inv_freq(int32_t head_dim, double theta, const RopeScaling& scaling, int32_t max_positions);

/// The factor cos and sin are multiplied by: 1 unless yarn.
double rope_attention_factor(const RopeScaling& scaling);

class RopeTable {
 public:
  /// Precomputes cos/sin for positions [0, max_positions); `scaling` has no default, so
  /// no caller drops a config's scaling by omission. The angle is computed in
  /// float32 as pos * inv_freq[i], as Hugging Face does. `model_positions` is the
  /// model's max_position_embeddings (YaRN's ramp reads it; 0 = max_positions).
  RopeTable(int32_t head_dim, double theta, int32_t max_positions, const RopeScaling& scaling,
            int32_t model_positions = 0);

  int32_t head_dim() const { return head_dim_; }
  int32_t max_positions() const { return max_positions_; }
  const float* cos(int32_t pos) const { return cos_.data() + int64_t{pos} * half_; }
  const float* sin(int32_t pos) const { return sin_.data() + int64_t{pos} * half_; }

 private:
  int32_t head_dim_, half_, max_positions_;
  std::vector<float> cos_, sin_;
};

/// Rotates `heads` vectors of head_dim floats, laid out contiguously at x (in place),
/// all at position `pos`. Requires pos < table.max_positions().
void apply_rope(const RopeTable& table, int32_t pos, float* x, int32_t heads);

}  // namespace specpipe::cpu
