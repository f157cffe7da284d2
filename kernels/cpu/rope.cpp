#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace specpipe::cpu {
namespace {

// Each step below is one of Hugging Face's float32 tensor operations (a Python scalar in
// such an operation is rounded to float first), in its order, so the frequencies round
// as theirs do.

/// theta^(2i/d), the base power of frequency i.
float theta_power(int32_t i, int32_t head_dim, double theta) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  return std::pow(static_cast<float>(theta), exponent);
}

/// 1 / theta^(2i/d): _compute_default_rope_parameters.
std::vector<float> default_inv_freq(int32_t head_dim, double theta) {
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = 1.0f / theta_power(static_cast<int32_t>(i), head_dim, theta);
  return inv_freq;
}

/// _compute_llama3_parameters: long wavelengths divided by factor, short ones kept, the
/// band between blended linearly in original / wavelength.
void llama3_inv_freq(const RopeScaling& s, std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(s.factor);
  const double old_context = s.original_max_positions;
  const float low_wavelen = static_cast<float>(old_context / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(old_context / s.high_freq_factor);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = (static_cast<float>(old_context) / wavelen - static_cast<float>(s.low_freq_factor)) /
                         static_cast<float>(s.high_freq_factor - s.low_freq_factor);
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
}

/// The dimension (of head_dim) whose frequency turns `rotations` times over `positions`.
double yarn_correction_dim(double rotations, int32_t head_dim, double theta, double positions) {
  return head_dim * std::log(positions / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(theta));
}

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

/// _compute_yarn_parameters: interpolated (divided by factor) frequencies below the ramp,
/// extrapolated (the default ones, as `inv_freq` comes in) above it, a linear ramp
/// between. The factor is the config's, even where max_position_embeddings /
/// original_max_position_embeddings says otherwise (transformers 5 warns and keeps it;
/// tests/data/rope-scaling-hf.json, case yarn_qwen3_40960).
void yarn_inv_freq(const RopeScaling& s, int32_t head_dim, double theta, int32_t max_positions,
                   std::vector<float>& inv_freq) {
  const float factor = static_cast<float>(s.factor);
  const double original = s.original_max_positions > 0 ? s.original_max_positions : max_positions;
  double low = yarn_correction_dim(s.beta_fast, head_dim, theta, original);
  double high = yarn_correction_dim(s.beta_slow, head_dim, theta, original);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(head_dim - 1));
  if (low == high) high += 0.001;  // no division by zero in the ramp
  const float low_f = static_cast<float>(low), range = static_cast<float>(high - low);
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const float extrapolation = inv_freq[static_cast<size_t>(i)];  // 1 / theta^(2i/d)
    const float interpolation = 1.0f / (factor * theta_power(i, head_dim, theta));
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / range, 0.0f, 1.0f);
    const float extrapolation_share = 1.0f - ramp;
    inv_freq[static_cast<size_t>(i)] =
        interpolation * (1.0f - extrapolation_share) + extrapolation * extrapolation_share;
  }
}

}  // namespace

const char* to_string(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::none: return "default";
    case RopeScaling::Type::linear: return "linear";
    case RopeScaling::Type::llama3: return "llama3";
    case RopeScaling::Type::yarn: return "yarn";
  }
  return "?";
}

std::vector<float> rope_inv_freq(int32_t head_dim, double theta, const RopeScaling& scaling, int32_t max_positions) {
  if (head_dim <= 0 || head_dim % 2 != 0) fail(ErrorCode::unsupported, "rope: head_dim {} is not even", head_dim);
  std::vector<float> inv_freq = default_inv_freq(head_dim, theta);
  switch (scaling.type) {
    case RopeScaling::Type::none: break;
    case RopeScaling::Type::linear:
      for (float& f : inv_freq) f /= static_cast<float>(scaling.factor);
      break;
    case RopeScaling::Type::llama3: llama3_inv_freq(scaling, inv_freq); break;
    case RopeScaling::Type::yarn: yarn_inv_freq(scaling, head_dim, theta, max_positions, inv_freq); break;
  }
  return inv_freq;
}

double rope_attention_factor(const RopeScaling& scaling) {
  if (scaling.type != RopeScaling::Type::yarn) return 1.0;
  if (scaling.attention_factor > 0.0) return scaling.attention_factor;
  const double factor = scaling.factor;
  if (scaling.mscale > 0.0 && scaling.mscale_all_dim > 0.0)
    return yarn_mscale(factor, scaling.mscale) / yarn_mscale(factor, scaling.mscale_all_dim);
  return yarn_mscale(factor, 1.0);
}

RopeTable::RopeTable(int32_t head_dim, double theta, int32_t max_positions, const RopeScaling& scaling,
                     int32_t model_positions)
    : head_dim_(head_dim), half_(head_dim / 2), max_positions_(max_positions) {
  const int32_t positions = model_positions > 0 ? model_positions : max_positions;
  const std::vector<float> inv_freq = rope_inv_freq(head_dim, theta, scaling, positions);
  const float attention = static_cast<float>(rope_attention_factor(scaling));
  cos_.resize(static_cast<size_t>(max_positions) * static_cast<size_t>(half_));
  sin_.resize(cos_.size());
  for (int32_t p = 0; p < max_positions; ++p)
    for (int32_t i = 0; i < half_; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[static_cast<size_t>(i)];
      cos_[static_cast<size_t>(p) * half_ + i] = std::cos(angle) * attention;
      sin_[static_cast<size_t>(p) * half_ + i] = std::sin(angle) * attention;
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
