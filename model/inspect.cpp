#include "model/inspect.h"

#include <map>
#include <string>
#include <system_error>

#include "core/error.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"

namespace specpipe {
namespace {

/// The RoPE scaling as used (null when none), with the attention factor it implies.
nlohmann::json describe_rope_scaling(const ModelConfig& c) {
  const cpu::RopeScaling& s = c.rope_scaling;
  if (s.type == cpu::RopeScaling::Type::none) return nullptr;
  nlohmann::json out = {{"rope_type", cpu::to_string(s.type)}, {"factor", s.factor}};
  if (s.original_max_positions > 0) out["original_max_position_embeddings"] = s.original_max_positions;
  if (s.type == cpu::RopeScaling::Type::llama3) {
    out["low_freq_factor"] = s.low_freq_factor;
    out["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.type == cpu::RopeScaling::Type::yarn) {
    out["beta_fast"] = s.beta_fast;
    out["beta_slow"] = s.beta_slow;
    out["attention_factor"] = cpu::rope_attention_factor(s);
  }
  return out;
}

nlohmann::json describe_config(const ModelConfig& c) {
  return {
      {"model_type", c.model_type},
      {"family", to_string(c.family)},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_layers", c.num_layers},
      {"num_heads", c.num_heads},
      {"num_kv_heads", c.num_kv_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", describe_rope_scaling(c)},
      {"rms_norm_eps", c.rms_norm_eps},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"qk_norm", c.qk_norm},
      {"attention_bias", c.attention_bias},
      {"o_proj_bias", c.o_proj_bias},
      {"mlp_bias", c.mlp_bias},
      {"eos_token_ids", c.eos_token_ids},
      {"weight_dtype", dtype_name(c.weight_dtype)},
  };
}

nlohmann::json describe_files(const std::filesystem::path& model_dir) {
  // Listing is informative: a file that vanishes or cannot be stat'ed is skipped, not fatal.
  std::error_code ec;
  std::map<std::string, uintmax_t> sizes;
  for (std::filesystem::directory_iterator it(model_dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code entry_ec;
    if (!it->is_regular_file(entry_ec)) continue;
    const uintmax_t size = it->file_size(entry_ec);
    if (!entry_ec) sizes.emplace(it->path().filename().string(), size);
  }
  nlohmann::json files = nlohmann::json::array();
  for (const auto& [name, size] : sizes) files.push_back({{"name", name}, {"bytes", size}});
  return files;
}

}  // namespace

nlohmann::json inspect_checkpoint(const std::filesystem::path& model_dir) {
  const ModelConfig config = ModelConfig::from_dir(model_dir);
  const auto archive = SafetensorsArchive::open(model_dir);

  nlohmann::json tensors = nlohmann::json::array();
  nlohmann::json bytes_by_dtype = nlohmann::json::object();
  int64_t parameters = 0;
  for (const auto& [name, t] : archive->tensors()) {
    tensors.push_back({{"name", name},
                       {"dtype", dtype_name(t.dtype)},
                       {"shape", t.shape},
                       {"file", t.file.filename().string()},
                       {"bytes", t.nbytes}});
    const std::string dtype(dtype_name(t.dtype));
    bytes_by_dtype[dtype] = bytes_by_dtype.value(dtype, uint64_t{0}) + t.nbytes;
    parameters += t.numel();
  }

  nlohmann::json weights;
  try {
    const ModelWeights w = load_weights(config, archive);
    weights = {{"ok", true},
               {"bytes_read_per_token", w.bytes_read_per_token()},
               {"tied_lm_head", w.lm_head.data == w.embed_tokens.data}};
  } catch (const Error& e) {
    weights = {{"ok", false}, {"code", to_string(e.code())}, {"error", e.what()}};
  }

  return {{"model_dir", model_dir.string()},
          {"config", describe_config(config)},
          {"parameters", parameters},
          {"tensor_bytes", archive->total_bytes()},
          {"bytes_by_dtype", bytes_by_dtype},
          {"tensors", tensors},
          {"files", describe_files(model_dir)},
          {"weights", weights}};
}

}  // namespace specpipe
