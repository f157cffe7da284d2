// Named synthetic model shapes (synthetic_models.h): the config.json values of the real
// checkpoints (shapes, positions, RoPE base and scaling), BF16.
#include "tools/gpu/synthetic_models.h"

#include <array>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"

namespace specpipe::gpu_tool {
namespace {

struct Shape {
  std::string_view name;
  ModelFamily family;
  int32_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim, positions;
  double theta;
  float eps;
  bool tied;
  double llama3_factor;  // 0: no scaling; else rope_scaling llama3 (low 1, high 4, original 8,192)
};

constexpr std::array<Shape, 6> kShapes{{
    {"llama3-8b", ModelFamily::llama, 128256, 4096, 14336, 32, 32, 8, 128, 8192, 500000.0, 1e-5f, false, 0.0},
    {"llama3.1-8b", ModelFamily::llama, 128256, 4096, 14336, 32, 32, 8, 128, 131072, 500000.0, 1e-5f, false, 8.0},
    {"llama3-1b", ModelFamily::llama, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 500000.0, 1e-5f, true, 32.0},
    {"qwen3-0.6b", ModelFamily::qwen3, 151936, 1024, 3072, 28, 16, 8, 128, 40960, 1000000.0, 1e-6f, true, 0.0},
    {"qwen3-4b", ModelFamily::qwen3, 151936, 2560, 9728, 36, 32, 8, 128, 40960, 1000000.0, 1e-6f, true, 0.0},
    {"qwen3-8b", ModelFamily::qwen3, 151936, 4096, 12288, 36, 32, 8, 128, 40960, 1000000.0, 1e-6f, false, 0.0},
}};

}  // namespace

ModelConfig synthetic_model_config(const std::string& name) {
  for (const Shape& s : kShapes) {
    if (s.name != name) continue;
    ModelConfig c;
    c.family = s.family;
    c.model_type = s.family == ModelFamily::llama ? "llama" : "qwen3";
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.intermediate;
    c.num_layers = s.layers;
    c.num_heads = s.heads;
    c.num_kv_heads = s.kv_heads;
    c.head_dim = s.head_dim;
    c.max_position_embeddings = s.positions;
    c.rope_theta = s.theta;
    if (s.llama3_factor > 0) {
      c.rope_scaling.type = cpu::RopeScaling::Type::llama3;
      c.rope_scaling.factor = s.llama3_factor;
      c.rope_scaling.low_freq_factor = 1.0;
      c.rope_scaling.high_freq_factor = 4.0;
      c.rope_scaling.original_max_positions = 8192;
    }
    c.rms_norm_eps = s.eps;
    c.tie_word_embeddings = s.tied;
    c.qk_norm = s.family == ModelFamily::qwen3;
    c.weight_dtype = DType::bf16;
    return c;
  }
  fail(ErrorCode::invalid_argument, "no synthetic model named '{}' ({})", name, synthetic_model_names());
}

std::string synthetic_model_names() {
  std::string names;
  for (const Shape& s : kShapes) names += (names.empty() ? "" : ", ") + std::string(s.name);
  return names;
}

}  // namespace specpipe::gpu_tool
