#include "model/config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/json_file.h"

namespace specpipe {
namespace {

using nlohmann::json;

/// What a family leaves implicit: transformers' class defaults for keys a config.json may
/// omit. They differ per family, so a missing key must not get one global default.
struct FamilyTraits {
  ModelFamily family;
  std::string_view model_type;
  int32_t absent_kv_heads;   ///< 0: num_attention_heads
  int32_t absent_head_dim;   ///< 0: hidden_size / num_attention_heads
  int32_t absent_max_positions;
};

constexpr std::array<FamilyTraits, 3> kFamilies{{
    {ModelFamily::llama, "llama", 0, 0, 2048},
    {ModelFamily::qwen2, "qwen2", 32, 0, 32768},
    {ModelFamily::qwen3, "qwen3", 32, 128, 32768},
}};

/// Typed reads of one JSON object's keys. Every error names the file and the key path.
/// A key set to null counts as absent, as transformers treats None as "use the default".
class Fields {
 public:
  Fields(const json& object, std::string file, std::string prefix = {})
      : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {}

  const json* find(std::string_view key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  std::string path(std::string_view key) const { return prefix_ + std::string(key); }
  const std::string& file() const { return file_; }

  const json& required(std::string_view key) const {
    const json* value = find(key);
    if (!value) fail(ErrorCode::not_found, "{}: required key '{}' missing", file_, path(key));
    return *value;
  }

  int32_t to_int(std::string_view key, const json& value) const {
    if (!value.is_number_integer()) wrong_type(key, value, "integer");
    bool fits = value.is_number_unsigned()
                    ? value.get<uint64_t>() <= uint64_t{std::numeric_limits<int32_t>::max()}
                    : value.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                          value.get<int64_t>() <= std::numeric_limits<int32_t>::max();
    if (!fits)
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} is out of the 32-bit integer range",
           file_, path(key), json_preview(value));
    return static_cast<int32_t>(value.get<int64_t>());
  }

  int32_t positive_int(std::string_view key, const json& value) const {
    int32_t v = to_int(key, value);
    if (v <= 0)
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} must be positive", file_, path(key), v);
    return v;
  }
  int32_t required_positive_int(std::string_view key) const {
    return positive_int(key, required(key));
  }
  int32_t optional_positive_int(std::string_view key, int32_t fallback) const {
    const json* value = find(key);
    return value ? positive_int(key, *value) : fallback;
  }

  double optional_positive_number(std::string_view key, double fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    if (!value->is_number()) wrong_type(key, *value, "number");
    double v = value->get<double>();
    if (!(v > 0.0))
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} must be positive", file_, path(key), v);
    return v;
  }

  bool optional_bool(std::string_view key, bool fallback) const {
    const json* value = find(key);
    if (!value) return fallback;
    if (!value->is_boolean()) wrong_type(key, *value, "boolean");
    return value->get<bool>();
  }

  std::optional<std::string> optional_string(std::string_view key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_string()) wrong_type(key, *value, "string");
    return value->get<std::string>();
  }

  /// The nested object under `key` (nullopt if absent or null).
  std::optional<Fields> optional_object(std::string_view key) const {
    const json* value = find(key);
    if (!value) return std::nullopt;
    if (!value->is_object()) wrong_type(key, *value, "object");
    return Fields(*value, file_, path(key) + ".");
  }

  [[noreturn]] void wrong_type(std::string_view key, const json& value,
                               std::string_view expected) const {
    fail(ErrorCode::invalid_argument, "{}: key '{}' is {} ({}), {} expected", file_, path(key),
         json_type_name(value), json_preview(value), expected);
  }

 private:
  const json& object_;
  std::string file_;
  std::string prefix_;
};

const FamilyTraits& family_of(const Fields& fields) {
  const json& value = fields.required("model_type");
  if (!value.is_string()) fields.wrong_type("model_type", value, "string");
  const auto type = value.get<std::string>();
  for (const auto& traits : kFamilies)
    if (traits.model_type == type) return traits;
  fail(ErrorCode::unsupported,
       "{}: model_type '{}' is not supported (supported: llama, qwen2, qwen3)", fields.file(),
       type);
}

/// `rope_type` (or the older spelling `type`) of a RoPE object: default, linear, llama3 or
/// yarn. Other schemes (dynamic NTK, longrope, ...) change the frequencies with the
/// sequence length and are refused rather than silently ignored.
/// A `rope_parameters` object may carry only the base (no type: default); a `rope_scaling`
/// object without a type is refused.
cpu::RopeScaling::Type parse_rope_type(const Fields& rope, bool type_required) {
  const char* key = rope.find("rope_type") ? "rope_type" : "type";
  const auto type = rope.optional_string(key);
  if (!type && !type_required) return cpu::RopeScaling::Type::none;
  if (!type) fail(ErrorCode::unsupported, "{}: key '{}' missing: the RoPE type", rope.file(), rope.path("rope_type"));
  if (*type == "default") return cpu::RopeScaling::Type::none;
  if (*type == "linear") return cpu::RopeScaling::Type::linear;
  if (*type == "llama3") return cpu::RopeScaling::Type::llama3;
  if (*type == "yarn") return cpu::RopeScaling::Type::yarn;
  fail(ErrorCode::unsupported, "{}: key '{}' = '{}' is not supported (default, linear, llama3, yarn)",
       rope.file(), rope.path(key), *type);
}

double required_positive_number(const Fields& rope, std::string_view key) {
  rope.required(key);
  return rope.optional_positive_number(key, 0.0);
}

/// The scaling keys of one RoPE object, as transformers' initialisers read them
/// (modeling_rope_utils: which keys each type requires, and their defaults).
cpu::RopeScaling parse_rope_scaling(const Fields& rope, bool type_required) {
  cpu::RopeScaling s;
  s.type = parse_rope_type(rope, type_required);
  using Type = cpu::RopeScaling::Type;
  if (s.type == Type::none) return s;
  s.factor = required_positive_number(rope, "factor");
  if (s.type == Type::llama3) {
    s.low_freq_factor = required_positive_number(rope, "low_freq_factor");
    s.high_freq_factor = required_positive_number(rope, "high_freq_factor");
    s.original_max_positions = rope.positive_int("original_max_position_embeddings",
                                                 rope.required("original_max_position_embeddings"));
    if (!(s.high_freq_factor > s.low_freq_factor))
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} must be above '{}' = {}", rope.file(),
           rope.path("high_freq_factor"), s.high_freq_factor, rope.path("low_freq_factor"), s.low_freq_factor);
  }
  if (s.type == Type::yarn) {
    s.original_max_positions = rope.optional_positive_int("original_max_position_embeddings", 0);
    s.beta_fast = rope.optional_positive_number("beta_fast", 32.0);
    s.beta_slow = rope.optional_positive_number("beta_slow", 1.0);
    s.attention_factor = rope.optional_positive_number("attention_factor", 0.0);
    s.mscale = rope.optional_positive_number("mscale", 0.0);
    s.mscale_all_dim = rope.optional_positive_number("mscale_all_dim", 0.0);
    s.truncate = rope.optional_bool("truncate", true);
  }
  return s;
}

/// RoPE base and scaling. transformers < 5 writes `rope_theta` and `rope_scaling` at the
/// top level; transformers >= 5 writes both into `rope_parameters`. A scaling is taken
/// from whichever object names one; two that both do are refused rather than one ignored.
void parse_rope(const Fields& fields, ModelConfig& c) {
  c.rope_theta = fields.optional_positive_number("rope_theta", 10000.0);
  const auto params = fields.optional_object("rope_parameters");
  const auto legacy = fields.optional_object("rope_scaling");
  if (params) c.rope_theta = params->optional_positive_number("rope_theta", c.rope_theta);
  const cpu::RopeScaling from_params = params ? parse_rope_scaling(*params, false) : cpu::RopeScaling{};
  const cpu::RopeScaling from_legacy = legacy ? parse_rope_scaling(*legacy, true) : cpu::RopeScaling{};
  using Type = cpu::RopeScaling::Type;
  if (from_params.type != Type::none && from_legacy.type != Type::none)
    fail(ErrorCode::invalid_argument, "{}: keys 'rope_parameters' and 'rope_scaling' both set a RoPE scaling; "
         "keep one", fields.file());
  c.rope_scaling = from_params.type != Type::none ? from_params : from_legacy;
}

/// Sliding-window attention is not implemented: refuse checkpoints that use it.
void require_full_attention(const Fields& fields) {
  if (fields.optional_bool("use_sliding_window", false))
    fail(ErrorCode::unsupported, "{}: key 'use_sliding_window' is true; sliding-window attention "
         "is not supported", fields.file());
  const json* layer_types = fields.find("layer_types");
  if (!layer_types) return;
  if (!layer_types->is_array()) fields.wrong_type("layer_types", *layer_types, "array");
  for (size_t i = 0; i < layer_types->size(); ++i) {
    const json& t = (*layer_types)[i];
    if (!t.is_string() || t.get<std::string>() != "full_attention")
      fail(ErrorCode::unsupported, "{}: key 'layer_types[{}]' = {} is not supported (only "
           "'full_attention')", fields.file(), i, json_preview(t));
  }
}

DType parse_weight_dtype(const Fields& fields) {
  const char* key = fields.find("dtype") ? "dtype" : "torch_dtype";
  auto name = fields.optional_string(key);
  if (!name) return DType::f32;  // transformers' default when unspecified
  if (*name == "float32") return DType::f32;
  if (*name == "float16") return DType::f16;
  if (*name == "bfloat16") return DType::bf16;
  fail(ErrorCode::unsupported, "{}: key '{}' = '{}' is not supported (float32, float16, bfloat16)",
       fields.file(), key, *name);
}

/// `key` as an int or a list of ints; empty when absent or null.
std::vector<int32_t> parse_token_ids(const Fields& fields, std::string_view key) {
  std::vector<int32_t> ids;
  const json* value = fields.find(key);
  if (!value) return ids;
  auto add = [&](const json& id, const std::string& where) {
    if (!id.is_number_integer()) fields.wrong_type(where, id, "integer token id");
    int32_t v = fields.to_int(where, id);
    if (v < 0)
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} is not a token id", fields.file(),
           fields.path(where), v);
    ids.push_back(v);
  };
  if (value->is_array()) {
    for (size_t i = 0; i < value->size(); ++i)
      add((*value)[i], fmt::format("{}[{}]", key, i));
  } else {
    add(*value, std::string(key));
  }
  return ids;
}

std::vector<int32_t> parse_eos(const Fields& fields, const std::filesystem::path& model_dir) {
  std::vector<int32_t> ids = parse_token_ids(fields, "eos_token_id");
  auto generation_path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(generation_path, ec)) return ids;
  json generation = read_json_object_file(generation_path);
  Fields generation_fields(generation, generation_path.string());
  for (int32_t id : parse_token_ids(generation_fields, "eos_token_id"))
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  return ids;
}

/// Upper bounds on config.json's sizes, far above any published checkpoint (largest
/// vocabularies ~256k, hidden 16k-18k, intermediate 53k, 126 layers, 128 heads, head_dim
/// 256, 10M positions), so that a typo or a hostile file is refused here, naming the key,
/// instead of reaching an allocation sized by it (the RoPE tables hold
/// max_position_embeddings x head_dim floats before any weight is read).
struct SizeLimit {
  std::string_view key;
  int32_t ModelConfig::*field;
  int32_t max;
};
constexpr std::array<SizeLimit, 8> kSizeLimits{{
    {"vocab_size", &ModelConfig::vocab_size, 1 << 24},
    {"hidden_size", &ModelConfig::hidden_size, 1 << 17},
    {"intermediate_size", &ModelConfig::intermediate_size, 1 << 20},
    {"num_hidden_layers", &ModelConfig::num_layers, 1 << 12},
    {"num_attention_heads", &ModelConfig::num_heads, 1 << 12},
    {"num_key_value_heads", &ModelConfig::num_kv_heads, 1 << 12},
    {"head_dim", &ModelConfig::head_dim, 1 << 12},
    {"max_position_embeddings", &ModelConfig::max_position_embeddings, 1 << 24},
}};
/// RoPE table entries (max_position_embeddings x head_dim floats: 8 GiB at the limit).
constexpr int64_t kMaxRopeEntries = int64_t{1} << 31;
/// Parameters the sizes declare: 2^41 (2.2 trillion), above the largest open checkpoints.
constexpr int64_t kMaxParameters = int64_t{1} << 41;

/// Parameters of the matrices the sizes declare (embeddings, lm_head, attention and MLP
/// projections; norms and biases are negligible). The per-key limits keep every product
/// below 2^62, so int64 cannot overflow.
int64_t declared_parameters(const ModelConfig& c) {
  const int64_t hidden = c.hidden_size;
  const int64_t embeddings = int64_t{c.vocab_size} * hidden * (c.tie_word_embeddings ? 1 : 2);
  const int64_t attention = hidden * (2 * c.q_dim() + 2 * c.kv_dim());
  const int64_t mlp = 3 * hidden * c.intermediate_size;
  return embeddings + int64_t{c.num_layers} * (attention + mlp);
}

void check_size_limits(const Fields& fields, const ModelConfig& c) {
  for (const SizeLimit& limit : kSizeLimits)
    if (c.*limit.field > limit.max)
      fail(ErrorCode::invalid_argument, "{}: key '{}' = {} is above the limit {}", fields.file(),
           limit.key, c.*limit.field, limit.max);
  const int64_t rope_entries = int64_t{c.max_position_embeddings} * c.head_dim;
  if (rope_entries > kMaxRopeEntries)
    fail(ErrorCode::invalid_argument, "{}: max_position_embeddings {} x head_dim {} = {} RoPE "
         "table entries, above the limit {}", fields.file(), c.max_position_embeddings,
         c.head_dim, rope_entries, kMaxRopeEntries);
  const int64_t parameters = declared_parameters(c);
  if (parameters > kMaxParameters)
    fail(ErrorCode::invalid_argument, "{}: the sizes declare {} parameters (vocab_size {}, "
         "hidden_size {}, intermediate_size {}, num_hidden_layers {}, num_attention_heads {} x "
         "head_dim {}), above the limit {}", fields.file(), parameters, c.vocab_size,
         c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads, c.head_dim,
         kMaxParameters);
}

}  // namespace

const char* to_string(ModelFamily family) {
  switch (family) {
    case ModelFamily::llama: return "llama";
    case ModelFamily::qwen2: return "qwen2";
    case ModelFamily::qwen3: return "qwen3";
  }
  return "?";
}

ModelConfig ModelConfig::from_dir(const std::filesystem::path& model_dir) {
  const auto config_path = model_dir / "config.json";
  const json config = read_json_object_file(config_path);
  const Fields fields(config, config_path.string());

  const FamilyTraits& traits = family_of(fields);
  ModelConfig c;
  c.family = traits.family;
  c.model_type = std::string(traits.model_type);

  c.vocab_size = fields.required_positive_int("vocab_size");
  c.hidden_size = fields.required_positive_int("hidden_size");
  c.intermediate_size = fields.required_positive_int("intermediate_size");
  c.num_layers = fields.required_positive_int("num_hidden_layers");
  c.num_heads = fields.required_positive_int("num_attention_heads");
  c.num_kv_heads = fields.optional_positive_int(
      "num_key_value_heads", traits.absent_kv_heads ? traits.absent_kv_heads : c.num_heads);
  if (fields.find("head_dim")) {
    c.head_dim = fields.optional_positive_int("head_dim", 0);
  } else if (traits.absent_head_dim) {
    c.head_dim = traits.absent_head_dim;
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail(ErrorCode::invalid_argument, "{}: hidden_size {} is not a multiple of "
           "num_attention_heads {} and no head_dim is given", fields.file(), c.hidden_size,
           c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.max_position_embeddings =
      fields.optional_positive_int("max_position_embeddings", traits.absent_max_positions);

  if (c.num_heads % c.num_kv_heads != 0)
    fail(ErrorCode::invalid_argument, "{}: num_attention_heads {} is not a multiple of "
         "num_key_value_heads {}", fields.file(), c.num_heads, c.num_kv_heads);
  if (c.head_dim % 2 != 0)
    fail(ErrorCode::invalid_argument, "{}: head_dim {} is odd; RoPE rotates pairs of dimensions",
         fields.file(), c.head_dim);

  parse_rope(fields, c);
  c.tie_word_embeddings = fields.optional_bool("tie_word_embeddings", false);
  check_size_limits(fields, c);
  c.rms_norm_eps = static_cast<float>(fields.optional_positive_number("rms_norm_eps", 1e-6));

  // Which projections carry biases is fixed by the family's modeling code, not only by
  // the config: qwen2 always biases q/k/v (never o); llama and qwen3 follow
  // `attention_bias` for all four; only llama has `mlp_bias`.
  bool attention_bias_key = fields.optional_bool("attention_bias", false);
  c.attention_bias = traits.family == ModelFamily::qwen2 || attention_bias_key;
  c.o_proj_bias = traits.family != ModelFamily::qwen2 && attention_bias_key;
  c.mlp_bias = traits.family == ModelFamily::llama && fields.optional_bool("mlp_bias", false);
  c.qk_norm = traits.family == ModelFamily::qwen3;

  auto act = fields.optional_string("hidden_act").value_or("silu");
  if (act != "silu")
    fail(ErrorCode::unsupported, "{}: key 'hidden_act' = '{}' is not supported (only 'silu')",
         fields.file(), act);
  require_full_attention(fields);
  if (fields.find("quantization_config"))
    fail(ErrorCode::unsupported, "{}: key 'quantization_config' is set; quantized checkpoints "
         "are not supported", fields.file());

  c.weight_dtype = parse_weight_dtype(fields);
  c.eos_token_ids = parse_eos(fields, model_dir);
  for (int32_t id : c.eos_token_ids)
    if (id >= c.vocab_size)
      spdlog::warn("{}: eos token id {} is outside the vocabulary ({}); it can never be produced",
                   model_dir.string(), id, c.vocab_size);
  return c;
}

}  // namespace specpipe
