// config.json parsing: the vendored checkpoints, family defaults, and every way a
// config.json can be refused (each error must name the file and the key).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <utility>
#include <vector>

#include "model/config.h"
#include "tests/model/model_files_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

using test::expect_error;

/// Writes `config` into a fresh directory and returns it.
std::filesystem::path config_dir(const nlohmann::json& config, const char* tag = "config") {
  auto dir = test::scratch_dir(tag);
  test::write_json(dir / "config.json", config);
  return dir;
}

TEST(ModelFilesConfig, DemoTargetIsQwen3) {
  auto c = ModelConfig::from_dir(test::model_dir("demo-target"));
  EXPECT_EQ(c.family, ModelFamily::qwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 8192);
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.intermediate_size, 1024);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.num_heads, 6);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 384);
  EXPECT_EQ(c.kv_dim(), 128);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0);  // from rope_parameters.rope_theta
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{0});
  EXPECT_EQ(c.weight_dtype, DType::bf16);
}

TEST(ModelFilesConfig, DemoDraftIsQwen3) {
  auto c = ModelConfig::from_dir(test::model_dir("demo-draft"));
  EXPECT_EQ(c.family, ModelFamily::qwen3);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.q_dim(), 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.vocab_size, 8192);
}

TEST(ModelFilesConfig, LlamaTinyRandom) {
  auto c = ModelConfig::from_dir(test::model_dir("llama-tiny-random"));
  EXPECT_EQ(c.family, ModelFamily::llama);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 160);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_EQ(c.weight_dtype, DType::f32);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{0});
}

TEST(ModelFilesConfig, FamilyDefaultsFollowTransformers) {
  auto llama = test::tiny_config("llama");
  for (const char* key : {"num_key_value_heads", "head_dim", "max_position_embeddings",
                          "rope_parameters", "rms_norm_eps", "tie_word_embeddings",
                          "hidden_act", "dtype", "eos_token_id"})
    llama.erase(key);
  auto c = ModelConfig::from_dir(config_dir(llama));
  EXPECT_EQ(c.num_kv_heads, 4);  // = num_attention_heads
  EXPECT_EQ(c.head_dim, 4);      // = hidden / heads
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.weight_dtype, DType::f32);
  EXPECT_TRUE(c.eos_token_ids.empty());

  auto qwen3 = test::tiny_config("qwen3");
  qwen3["num_attention_heads"] = 64;
  qwen3.erase("head_dim");
  qwen3.erase("num_key_value_heads");
  qwen3.erase("max_position_embeddings");
  auto q = ModelConfig::from_dir(config_dir(qwen3));
  EXPECT_EQ(q.head_dim, 128);      // Qwen3Config default, not hidden / heads
  EXPECT_EQ(q.num_kv_heads, 32);   // Qwen3Config default
  EXPECT_EQ(q.max_position_embeddings, 32768);
}

TEST(ModelFilesConfig, BiasFlagsPerFamily) {
  auto qwen2 = test::tiny_config("qwen2");
  qwen2.erase("attention_bias");
  auto q2 = ModelConfig::from_dir(config_dir(qwen2));
  EXPECT_TRUE(q2.attention_bias);  // qwen2 always biases q/k/v
  EXPECT_FALSE(q2.o_proj_bias);
  EXPECT_FALSE(q2.qk_norm);

  auto llama = test::tiny_config("llama");
  llama["attention_bias"] = true;
  llama["mlp_bias"] = true;
  auto l = ModelConfig::from_dir(config_dir(llama));
  EXPECT_TRUE(l.attention_bias);
  EXPECT_TRUE(l.o_proj_bias);
  EXPECT_TRUE(l.mlp_bias);

  auto qwen3 = test::tiny_config("qwen3");
  qwen3["mlp_bias"] = true;  // not a qwen3 key: transformers ignores it
  EXPECT_FALSE(ModelConfig::from_dir(config_dir(qwen3)).mlp_bias);
}

TEST(ModelFilesConfig, RopeThetaAtTopLevelAndTorchDtype) {
  auto config = test::tiny_config("qwen2");
  config.erase("rope_parameters");
  config.erase("dtype");
  config["rope_theta"] = 1000000.0;
  config["rope_scaling"] = nullptr;
  config["torch_dtype"] = "float16";
  auto c = ModelConfig::from_dir(config_dir(config));
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.weight_dtype, DType::f16);
}

TEST(ModelFilesConfig, EosFromListAndGenerationConfig) {
  auto config = test::tiny_config();
  config["eos_token_id"] = {2, 5};
  auto dir = config_dir(config);
  test::write_json(dir / "generation_config.json", {{"eos_token_id", {5, 7}}});
  EXPECT_EQ(ModelConfig::from_dir(dir).eos_token_ids, (std::vector<int32_t>{2, 5, 7}));

  config["eos_token_id"] = nullptr;
  test::write_json(dir / "config.json", config);
  EXPECT_EQ(ModelConfig::from_dir(dir).eos_token_ids, (std::vector<int32_t>{5, 7}));
}

TEST(ModelFilesConfig, MissingConfigJson) {
  auto dir = test::scratch_dir("no-config");
  expect_error([&] { ModelConfig::from_dir(dir); }, ErrorCode::not_found,
               {(dir / "config.json").string()});
}

TEST(ModelFilesConfig, MalformedConfigJson) {
  auto dir = test::scratch_dir("bad-json");
  std::ofstream(dir / "config.json") << "{\"model_type\": \"qwen3\",";
  expect_error([&] { ModelConfig::from_dir(dir); }, ErrorCode::corrupt_file,
               {"config.json", "malformed JSON"});
}

TEST(ModelFilesConfig, UnknownModelType) {
  auto config = test::tiny_config("mistral");
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'mistral'", "llama, qwen2, qwen3"});
}

TEST(ModelFilesConfig, RequiredKeyMissing) {
  auto config = test::tiny_config();
  config.erase("intermediate_size");
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::not_found,
               {"config.json", "'intermediate_size'"});
}

TEST(ModelFilesConfig, ModelTypeMissing) {
  auto config = test::tiny_config();
  config.erase("model_type");
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::not_found,
               {"config.json", "'model_type'"});
}

TEST(ModelFilesConfig, KeyOfWrongType) {
  auto config = test::tiny_config();
  config["hidden_size"] = "16";
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "'hidden_size'", "string", "integer expected"});

  config = test::tiny_config();
  config["tie_word_embeddings"] = 1;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "'tie_word_embeddings'", "boolean expected"});

  config = test::tiny_config();
  config["num_hidden_layers"] = 2.5;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"'num_hidden_layers'", "integer expected"});

  config = test::tiny_config();
  config["rope_parameters"]["rope_theta"] = "big";
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"'rope_parameters.rope_theta'", "number expected"});
}

TEST(ModelFilesConfig, NonPositiveOrHugeSize) {
  auto config = test::tiny_config();
  config["vocab_size"] = 0;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "'vocab_size'", "positive"});
  config["vocab_size"] = 1ll << 40;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"'vocab_size'", "range"});
}

// Sizes inside 32 bits but absurd are refused by config.json alone, naming the key, before
// anything is sized by them (the RoPE tables are built from max_position_embeddings x
// head_dim before any weight is read).
TEST(ModelFilesConfig, SizesAboveLimits) {
  const std::vector<std::pair<const char*, int64_t>> absurd{
      {"vocab_size", 1ll << 30},          {"hidden_size", 1000000000},
      {"intermediate_size", 1ll << 30},   {"num_hidden_layers", 1000000},
      {"num_attention_heads", 1ll << 20}, {"head_dim", 1ll << 20},
      {"max_position_embeddings", 2000000000}};
  for (const auto& [key, value] : absurd) {
    SCOPED_TRACE(key);
    auto config = test::tiny_config();
    config[key] = value;
    if (std::string(key) == "num_attention_heads") config["num_key_value_heads"] = value;
    expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
                 {"config.json", fmt::format("'{}' = {}", key, value), "above the limit"});
  }

  auto config = test::tiny_config();
  config["max_position_embeddings"] = 1 << 24;
  config["head_dim"] = 512;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "max_position_embeddings 16777216 x head_dim 512", "RoPE"});

  // Each size within its own limit; together 3 x 2^17 x 2^20 x 4096 MLP weights.
  config = test::tiny_config();
  config["hidden_size"] = 1 << 17;
  config["intermediate_size"] = 1 << 20;
  config["num_hidden_layers"] = 1 << 12;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "parameters", "num_hidden_layers 4096", "above the limit"});
}

// The largest published dense shapes stay accepted (Llama 3.1 405B's config).
TEST(ModelFilesConfig, LargestRealSizesAccepted) {
  auto config = test::tiny_config("llama");
  config["vocab_size"] = 128256;
  config["hidden_size"] = 16384;
  config["intermediate_size"] = 53248;
  config["num_hidden_layers"] = 126;
  config["num_attention_heads"] = 128;
  config["num_key_value_heads"] = 8;
  config["head_dim"] = 128;
  config["max_position_embeddings"] = 131072;
  auto c = ModelConfig::from_dir(config_dir(config));
  EXPECT_EQ(c.hidden_size, 16384);
  EXPECT_EQ(c.num_layers, 126);
}

TEST(ModelFilesConfig, InconsistentHeads) {
  auto config = test::tiny_config();
  config["num_key_value_heads"] = 3;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "num_attention_heads 4", "num_key_value_heads 3"});

  config = test::tiny_config("llama");
  config.erase("head_dim");
  config["num_attention_heads"] = 3;
  config["num_key_value_heads"] = 3;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"config.json", "hidden_size 16", "num_attention_heads 3"});
}

TEST(ModelFilesConfig, RopeScalingLlama3) {
  auto config = test::tiny_config("llama");
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                            {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const auto c = ModelConfig::from_dir(config_dir(config));
  EXPECT_EQ(c.rope_scaling.type, cpu::RopeScaling::Type::llama3);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 8192);

  config["rope_scaling"].erase("low_freq_factor");  // HF requires every llama3 key
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::not_found,
               {"config.json", "'rope_scaling.low_freq_factor'"});
  config["rope_scaling"]["low_freq_factor"] = 4.0;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"'rope_scaling.high_freq_factor'", "above"});
}

TEST(ModelFilesConfig, RopeScalingYarnAndLinear) {
  auto config = test::tiny_config("qwen3");  // transformers 5: everything in rope_parameters
  config["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000000.0}, {"factor", 4.0},
                               {"original_max_position_embeddings", 32768}, {"beta_fast", 16}};
  auto c = ModelConfig::from_dir(config_dir(config));
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.type, cpu::RopeScaling::Type::yarn);
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_positions, 32768);
  EXPECT_EQ(c.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);  // HF's default
  EXPECT_TRUE(c.rope_scaling.truncate);

  config = test::tiny_config("qwen2");
  config["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // pre-4.45 spelling
  c = ModelConfig::from_dir(config_dir(config));
  EXPECT_EQ(c.rope_scaling.type, cpu::RopeScaling::Type::linear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);

  config["rope_scaling"] = {{"type", "linear"}};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::not_found,
               {"config.json", "'rope_scaling.factor'"});
  config["rope_scaling"] = {{"type", "linear"}, {"factor", -1.0}};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::invalid_argument,
               {"'rope_scaling.factor'", "positive"});
}

TEST(ModelFilesConfig, RopeScalingUnsupported) {
  auto config = test::tiny_config("llama");
  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 8.0}};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'rope_scaling.rope_type'", "'dynamic'", "llama3, yarn"});

  config = test::tiny_config("qwen2");
  config["rope_parameters"]["rope_type"] = "longrope";
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'rope_parameters.rope_type'", "'longrope'"});

  config = test::tiny_config("qwen2");
  config["rope_scaling"] = {{"factor", 2.0}};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'rope_scaling.rope_type'", "missing"});
}

TEST(ModelFilesConfig, SlidingWindowUnsupported) {
  auto config = test::tiny_config("qwen2");
  config["use_sliding_window"] = true;
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'use_sliding_window'"});

  config = test::tiny_config("qwen3");
  config["layer_types"] = {"full_attention", "sliding_attention"};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'layer_types[1]'", "sliding_attention"});
}

TEST(ModelFilesConfig, ActivationAndQuantizationUnsupported) {
  auto config = test::tiny_config();
  config["hidden_act"] = "gelu";
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'hidden_act'", "'gelu'"});

  config = test::tiny_config();
  config["quantization_config"] = {{"quant_method", "awq"}};
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'quantization_config'"});

  config = test::tiny_config();
  config["dtype"] = "float8_e4m3fn";
  expect_error([&] { ModelConfig::from_dir(config_dir(config)); }, ErrorCode::unsupported,
               {"config.json", "'dtype'", "float8_e4m3fn"});
}

TEST(ModelFilesConfig, BadEosInGenerationConfig) {
  auto dir = config_dir(test::tiny_config());
  test::write_json(dir / "generation_config.json", {{"eos_token_id", {1, "two"}}});
  expect_error([&] { ModelConfig::from_dir(dir); }, ErrorCode::invalid_argument,
               {"generation_config.json", "'eos_token_id[1]'", "\"two\""});
}

}  // namespace
}  // namespace specpipe
