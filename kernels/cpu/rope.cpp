#include "kernels/cpu/rope.h"

#include <cmath>

#include "core/error.h"

namespace specpipe::cpu {

RopeTable::RopeTable(int32_t head_dim, double theta, int32_t max_positions)
    : head_dim_(head_dim), half_(head_dim / 2), max_positions_(max_positions) {
  if (head_dim % 2 != 0) fail(ErrorCode::unsupported, "rope: head_dim {} is odd", head_dim);
  std::vector<float> inv_freq(static_cast<size_t>(half_));
  for (int32_t i = 0; i < half_; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(static_cast<float>(theta), exponent);
  }
  cos_.resize(static_cast<size_t>(max_positions) * static_cast<size_t>(half_));
  sin_.resize(cos_.size());
  for (int32_t p = 0; p < max_positions; ++p)
    for (int32_t i = 0; i < half_; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(p) * half_ + i] = std::cos(angle);
      sin_[static_cast<size_t>(p) * half_ + i] = std::sin(angle);
    }
}

void apply_rope(const RopeTable& table, int32_t pos, float* x, int32_t heads) {
  if (pos < 0 || pos >= table.max_positions())
    fail(ErrorCode::out_of_capacity, "rope: position {} outside the model's {} positions", pos,
         table.max_positions());
  const int32_t half = table.head_dim() / 2;
  const float* c = table.cos(pos);
  const float* s = table.sin(pos);
  for (int32_t h = 0; h < heads; ++h) {
    float* v = x + int64_t{h} * table.head_dim();
    for (int32_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * c[i] - b * s[i];
      v[i + half] = b * c[i] + a * s[i];
    }
  }
}

}  // namespace specpipe::cpu
