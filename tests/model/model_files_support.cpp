#include "tests/model/model_files_support.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

namespace specpipe::test {
namespace {

std::vector<std::byte> le_u64(uint64_t v) {
  std::vector<std::byte> out(8);
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = std::byte(uint8_t(v >> (8 * i)));
  return out;
}

void write_bytes(const std::filesystem::path& file, const std::vector<std::byte>& bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << file;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

std::vector<std::byte> encode(const std::vector<float>& values, DType dtype) {
  std::vector<std::byte> out(values.size() * dtype_size(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    std::byte* p = out.data() + i * dtype_size(dtype);
    if (dtype == DType::f32) {
      std::memcpy(p, &values[i], 4);
    } else {
      uint16_t bits = dtype == DType::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(p, &bits, 2);
    }
  }
  return out;
}

void write_safetensors(const std::filesystem::path& file, const std::vector<TensorSpec>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{"format", "pt"}};
  std::vector<std::byte> data;
  for (const auto& t : tensors) {
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  write_raw_safetensors(file, text, data);
}

void write_raw_safetensors(const std::filesystem::path& file, const std::string& header,
                           const std::vector<std::byte>& data, uint64_t declared_length) {
  auto bytes = le_u64(declared_length ? declared_length : header.size());
  for (char c : header) bytes.push_back(std::byte(static_cast<unsigned char>(c)));
  bytes.insert(bytes.end(), data.begin(), data.end());
  write_bytes(file, bytes);
}

void write_sharded(const std::filesystem::path& dir, const std::vector<TensorSpec>& tensors,
                   int num_shards) {
  std::vector<std::vector<TensorSpec>> shards(static_cast<size_t>(num_shards));
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    size_t s = i % shards.size();
    auto name = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, num_shards);
    shards[s].push_back(tensors[i]);
    weight_map[tensors[i].name] = name;
  }
  for (size_t s = 0; s < shards.size(); ++s)
    write_safetensors(dir / fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, num_shards),
                      shards[s]);
  write_json(dir / "model.safetensors.index.json",
             {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

void write_json(const std::filesystem::path& file, const nlohmann::json& value) {
  std::ofstream out(file, std::ios::trunc);
  out << value.dump(2);
  ASSERT_TRUE(out.good()) << file;
}

nlohmann::json tiny_config(const std::string& model_type) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", model_type},
          {"vocab_size", 32},
          {"hidden_size", 16},
          {"intermediate_size", 24},
          {"num_hidden_layers", 2},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 8},
          {"max_position_embeddings", 128},
          {"rope_parameters", {{"rope_theta", 5000.0}, {"rope_type", "default"}}},
          {"rms_norm_eps", 1e-5},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false},
          {"attention_bias", false},
          {"use_sliding_window", false},
          {"eos_token_id", 2},
          {"dtype", "float32"}};
}

std::vector<float> tiny_values(size_t index, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(static_cast<int>((i * 7 + index * 13) % 64) - 32) / 8.0f;
  return values;
}

std::vector<TensorSpec> tiny_tensors(const nlohmann::json& config, DType dtype) {
  const std::string type = config.at("model_type");
  const int64_t vocab = config.at("vocab_size"), hidden = config.at("hidden_size"),
                inter = config.at("intermediate_size"), layers = config.at("num_hidden_layers"),
                heads = config.at("num_attention_heads"),
                kv_heads = config.at("num_key_value_heads"), head_dim = config.at("head_dim");
  const int64_t q_dim = heads * head_dim, kv_dim = kv_heads * head_dim;
  const bool attn_bias = config.value("attention_bias", false);
  const bool qkv_bias = type == "qwen2" || attn_bias;
  const bool o_bias = type != "qwen2" && attn_bias;
  const bool mlp_bias = type == "llama" && config.value("mlp_bias", false);

  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"model.embed_tokens.weight", {vocab, hidden}});
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    shapes.push_back({p + "self_attn.q_proj.weight", {q_dim, hidden}});
    shapes.push_back({p + "self_attn.k_proj.weight", {kv_dim, hidden}});
    shapes.push_back({p + "self_attn.v_proj.weight", {kv_dim, hidden}});
    shapes.push_back({p + "self_attn.o_proj.weight", {hidden, q_dim}});
    if (qkv_bias) {
      shapes.push_back({p + "self_attn.q_proj.bias", {q_dim}});
      shapes.push_back({p + "self_attn.k_proj.bias", {kv_dim}});
      shapes.push_back({p + "self_attn.v_proj.bias", {kv_dim}});
    }
    if (o_bias) shapes.push_back({p + "self_attn.o_proj.bias", {hidden}});
    if (type == "qwen3") {
      shapes.push_back({p + "self_attn.q_norm.weight", {head_dim}});
      shapes.push_back({p + "self_attn.k_norm.weight", {head_dim}});
    }
    shapes.push_back({p + "mlp.gate_proj.weight", {inter, hidden}});
    shapes.push_back({p + "mlp.up_proj.weight", {inter, hidden}});
    shapes.push_back({p + "mlp.down_proj.weight", {hidden, inter}});
    if (mlp_bias) {
      shapes.push_back({p + "mlp.gate_proj.bias", {inter}});
      shapes.push_back({p + "mlp.up_proj.bias", {inter}});
      shapes.push_back({p + "mlp.down_proj.bias", {hidden}});
    }
    shapes.push_back({p + "input_layernorm.weight", {hidden}});
    shapes.push_back({p + "post_attention_layernorm.weight", {hidden}});
  }
  shapes.push_back({"model.norm.weight", {hidden}});
  if (!config.value("tie_word_embeddings", false))
    shapes.push_back({"lm_head.weight", {vocab, hidden}});

  std::vector<TensorSpec> tensors;
  for (size_t i = 0; i < shapes.size(); ++i) {
    auto& [name, shape] = shapes[i];
    tensors.push_back({name, dtype, shape, encode(tiny_values(i, numel(shape)), dtype)});
  }
  return tensors;
}

std::vector<TensorSpec> write_tiny_checkpoint(const std::filesystem::path& dir,
                                              const nlohmann::json& config, DType dtype) {
  write_json(dir / "config.json", config);
  auto tensors = tiny_tensors(config, dtype);
  write_safetensors(dir / "model.safetensors", tensors);
  return tensors;
}

std::string expect_error(const std::function<void()>& fn, ErrorCode code,
                         std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(to_string(e.code()), to_string(code)) << message;
    for (const auto& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message lacks '" << needle << "': " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-specpipe exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "no error thrown; expected " << to_string(code);
  return {};
}

}  // namespace specpipe::test
