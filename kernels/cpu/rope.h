#pragma once
/// Rotary position embedding, "rotate half" layout (Llama/Qwen in Hugging Face):
/// for i < d/2, (x[i], x[i + d/2]) is rotated by angle pos * theta^(-2i/d).
#include <cstdint>
#include <vector>

namespace specpipe::cpu {

class RopeTable {
 public:
  /// Precomputes cos/sin for positions [0, max_positions). The angle is computed in
  /// float32 as pos * inv_freq[i], inv_freq[i] = 1 / theta^(2i/d), as Hugging Face does,
  /// so that positions far into a long context round the same way as the reference.
  RopeTable(int32_t head_dim, double theta, int32_t max_positions);

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
