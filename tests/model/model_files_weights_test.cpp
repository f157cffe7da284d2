// load_weights: the vendored checkpoints, hand-built F16 / F32-sharded checkpoints read
// back exactly, and the shape / presence / dtype checks against the config.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>

#include "model/config.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "tests/model/model_files_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

using test::expect_error;

struct Loaded {
  ModelConfig config;
  std::shared_ptr<const SafetensorsArchive> archive;
  ModelWeights weights;
};

Loaded load(const std::filesystem::path& dir) {
  Loaded l;
  l.config = ModelConfig::from_dir(dir);
  l.archive = SafetensorsArchive::open(dir);
  l.weights = load_weights(l.config, l.archive);
  return l;
}

/// Checks a matrix against the archive entry of the same name: same bytes in place.
void expect_mapped(const SafetensorsArchive& archive, const std::string& name,
                   const MatrixWeight& m, DType dtype, int64_t rows, int64_t cols) {
  SCOPED_TRACE(name);
  const TensorEntry& e = archive.get(name);
  EXPECT_EQ(m.data, static_cast<const void*>(e.data));  // used in place from the map
  EXPECT_EQ(m.dtype, dtype);
  EXPECT_EQ(m.rows, rows);
  EXPECT_EQ(m.cols, cols);
  EXPECT_EQ(m.bytes(), e.nbytes);
}

/// Checks a float vector against the archive entry of the same name, converted exactly.
void expect_vector(const SafetensorsArchive& archive, const std::string& name,
                   const std::vector<float>& v, int64_t size) {
  SCOPED_TRACE(name);
  const TensorEntry& e = archive.get(name);
  ASSERT_EQ(static_cast<int64_t>(v.size()), size);
  for (size_t i = 0; i < v.size(); ++i) {
    float expected;
    if (e.dtype == DType::f32) {
      std::memcpy(&expected, e.data + 4 * i, 4);
    } else {
      uint16_t bits;
      std::memcpy(&bits, e.data + 2 * i, 2);
      expected = e.dtype == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
    }
    ASSERT_EQ(v[i], expected) << "element " << i;
  }
}

/// Every tensor of a vendored checkpoint lands where the config says, in place.
void expect_all_mapped(const Loaded& l, DType dtype) {
  const ModelConfig& c = l.config;
  const SafetensorsArchive& a = *l.archive;
  const auto& w = l.weights;
  expect_mapped(a, "model.embed_tokens.weight", w.embed_tokens, dtype, c.vocab_size,
                c.hidden_size);
  expect_vector(a, "model.norm.weight", w.final_norm, c.hidden_size);
  ASSERT_EQ(static_cast<int32_t>(w.layers.size()), c.num_layers);
  size_t used = 2 + (c.tie_word_embeddings ? 0 : 1);
  for (int32_t i = 0; i < c.num_layers; ++i) {
    const auto p = fmt::format("model.layers.{}.", i);
    const LayerWeights& L = w.layers[static_cast<size_t>(i)];
    expect_mapped(a, p + "self_attn.q_proj.weight", L.q_proj, dtype, c.q_dim(), c.hidden_size);
    expect_mapped(a, p + "self_attn.k_proj.weight", L.k_proj, dtype, c.kv_dim(), c.hidden_size);
    expect_mapped(a, p + "self_attn.v_proj.weight", L.v_proj, dtype, c.kv_dim(), c.hidden_size);
    expect_mapped(a, p + "self_attn.o_proj.weight", L.o_proj, dtype, c.hidden_size, c.q_dim());
    expect_mapped(a, p + "mlp.gate_proj.weight", L.gate_proj, dtype, c.intermediate_size,
                  c.hidden_size);
    expect_mapped(a, p + "mlp.up_proj.weight", L.up_proj, dtype, c.intermediate_size,
                  c.hidden_size);
    expect_mapped(a, p + "mlp.down_proj.weight", L.down_proj, dtype, c.hidden_size,
                  c.intermediate_size);
    expect_vector(a, p + "input_layernorm.weight", L.input_norm, c.hidden_size);
    expect_vector(a, p + "post_attention_layernorm.weight", L.post_attention_norm,
                  c.hidden_size);
    used += 9;
    if (c.qk_norm) {
      expect_vector(a, p + "self_attn.q_norm.weight", L.q_norm, c.head_dim);
      expect_vector(a, p + "self_attn.k_norm.weight", L.k_norm, c.head_dim);
      used += 2;
    } else {
      EXPECT_TRUE(L.q_norm.empty() && L.k_norm.empty());
    }
    EXPECT_TRUE(L.q_bias.empty() && L.k_bias.empty() && L.v_bias.empty() && L.o_bias.empty());
    EXPECT_TRUE(L.gate_bias.empty() && L.up_bias.empty() && L.down_bias.empty());
  }
  EXPECT_EQ(used, a.tensors().size());  // nothing in the checkpoint left unmapped
  EXPECT_EQ(w.storage.get(), static_cast<const void*>(l.archive.get()));
}

TEST(ModelFilesWeights, DemoTargetShardedBf16Tied) {
  auto l = load(test::model_dir("demo-target"));
  expect_all_mapped(l, DType::bf16);
  // Tied: lm_head is the embedding itself, not a second tensor.
  EXPECT_EQ(l.weights.lm_head.data, l.weights.embed_tokens.data);
  EXPECT_EQ(l.weights.lm_head.rows, 8192);
  EXPECT_EQ(l.weights.lm_head.cols, 384);
  EXPECT_EQ(l.weights.lm_head.dtype, DType::bf16);
  // 8 layers x (q 384 + k 128 + v 128 + o 384 + 3 x 1024) x 384 + lm_head 8192 x 384, BF16.
  size_t layer = (384 + 128 + 128 + 384 + 3 * 1024) * 384;
  EXPECT_EQ(l.weights.bytes_read_per_token(), (8 * layer + 8192 * 384) * 2);
}

TEST(ModelFilesWeights, DemoDraftSingleFileBf16Tied) {
  auto l = load(test::model_dir("demo-draft"));
  expect_all_mapped(l, DType::bf16);
  EXPECT_EQ(l.weights.lm_head.data, l.weights.embed_tokens.data);
}

TEST(ModelFilesWeights, LlamaTinyRandomF32Untied) {
  auto l = load(test::model_dir("llama-tiny-random"));
  expect_all_mapped(l, DType::f32);
  expect_mapped(*l.archive, "lm_head.weight", l.weights.lm_head, DType::f32, 8192, 64);
  EXPECT_NE(l.weights.lm_head.data, l.weights.embed_tokens.data);
}

TEST(ModelFilesWeights, ArchiveOutlivesCallerHandles) {
  ModelWeights w;
  {
    auto config = ModelConfig::from_dir(test::model_dir("demo-draft"));
    w = load_weights(config, SafetensorsArchive::open(test::model_dir("demo-draft")));
  }
  // Only w.storage keeps the map alive now; reading through it must be valid (ASan).
  uint16_t first;
  std::memcpy(&first, w.embed_tokens.data, 2);
  (void)first;
  EXPECT_NE(w.storage, nullptr);
}

/// Checks a hand-built checkpoint's weights against the values the writer put in.
void expect_tiny_values(const ModelWeights& w, const std::vector<test::TensorSpec>& written) {
  std::map<std::string, std::pair<size_t, const test::TensorSpec*>> by_name;
  for (size_t i = 0; i < written.size(); ++i) by_name[written[i].name] = {i, &written[i]};
  auto matrix = [&](const std::string& name, const MatrixWeight& m) {
    SCOPED_TRACE(name);
    const auto& spec = *by_name.at(name).second;
    ASSERT_EQ(m.bytes(), spec.bytes.size());
    EXPECT_EQ(std::memcmp(m.data, spec.bytes.data(), spec.bytes.size()), 0);
  };
  auto vector = [&](const std::string& name, const std::vector<float>& v) {
    SCOPED_TRACE(name);
    auto [index, spec] = by_name.at(name);
    EXPECT_EQ(v, test::tiny_values(index, static_cast<int64_t>(v.size())));
  };
  matrix("model.embed_tokens.weight", w.embed_tokens);
  vector("model.norm.weight", w.final_norm);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto p = fmt::format("model.layers.{}.", i);
    const LayerWeights& L = w.layers[i];
    matrix(p + "self_attn.q_proj.weight", L.q_proj);
    matrix(p + "self_attn.k_proj.weight", L.k_proj);
    matrix(p + "self_attn.v_proj.weight", L.v_proj);
    matrix(p + "self_attn.o_proj.weight", L.o_proj);
    matrix(p + "mlp.gate_proj.weight", L.gate_proj);
    matrix(p + "mlp.up_proj.weight", L.up_proj);
    matrix(p + "mlp.down_proj.weight", L.down_proj);
    vector(p + "input_layernorm.weight", L.input_norm);
    vector(p + "post_attention_layernorm.weight", L.post_attention_norm);
    if (!L.q_norm.empty()) vector(p + "self_attn.q_norm.weight", L.q_norm);
    if (!L.k_norm.empty()) vector(p + "self_attn.k_norm.weight", L.k_norm);
    if (!L.q_bias.empty()) vector(p + "self_attn.q_proj.bias", L.q_bias);
    if (!L.k_bias.empty()) vector(p + "self_attn.k_proj.bias", L.k_bias);
    if (!L.v_bias.empty()) vector(p + "self_attn.v_proj.bias", L.v_bias);
    if (!L.o_bias.empty()) vector(p + "self_attn.o_proj.bias", L.o_bias);
    if (!L.gate_bias.empty()) vector(p + "mlp.gate_proj.bias", L.gate_bias);
    if (!L.up_bias.empty()) vector(p + "mlp.up_proj.bias", L.up_bias);
    if (!L.down_bias.empty()) vector(p + "mlp.down_proj.bias", L.down_bias);
  }
  if (by_name.contains("lm_head.weight")) matrix("lm_head.weight", w.lm_head);
}

TEST(ModelFilesWeights, HandBuiltF16SingleFile) {
  auto dir = test::scratch_dir("f16");
  auto config = test::tiny_config("qwen3");
  config["dtype"] = "float16";
  auto written = test::write_tiny_checkpoint(dir, config, DType::f16);
  auto l = load(dir);
  EXPECT_EQ(l.weights.embed_tokens.dtype, DType::f16);
  EXPECT_EQ(l.weights.layers[0].q_proj.rows, 32);  // 4 heads x head_dim 8, not hidden 16
  EXPECT_EQ(l.weights.layers[0].q_norm.size(), 8u);
  expect_tiny_values(l.weights, written);
}

TEST(ModelFilesWeights, HandBuiltF32Sharded) {
  auto dir = test::scratch_dir("f32-sharded");
  auto config = test::tiny_config("qwen2");  // q/k/v biases
  test::write_json(dir / "config.json", config);
  auto written = test::tiny_tensors(config, DType::f32);
  test::write_sharded(dir, written, 3);
  auto l = load(dir);
  EXPECT_EQ(l.weights.layers[1].q_bias.size(), 32u);
  EXPECT_EQ(l.weights.layers[1].k_bias.size(), 16u);
  EXPECT_TRUE(l.weights.layers[1].o_bias.empty());
  EXPECT_TRUE(l.weights.layers[1].q_norm.empty());
  EXPECT_EQ(l.weights.lm_head.dtype, DType::f32);
  EXPECT_NE(l.weights.lm_head.data, l.weights.embed_tokens.data);
  expect_tiny_values(l.weights, written);
}

TEST(ModelFilesWeights, HandBuiltLlamaWithAllBiasesBf16) {
  auto dir = test::scratch_dir("llama-bias");
  auto config = test::tiny_config("llama");
  config["attention_bias"] = true;
  config["mlp_bias"] = true;
  config["tie_word_embeddings"] = true;
  auto written = test::write_tiny_checkpoint(dir, config, DType::bf16);
  auto l = load(dir);
  const LayerWeights& L = l.weights.layers[0];
  EXPECT_EQ(L.o_bias.size(), 16u);
  EXPECT_EQ(L.gate_bias.size(), 24u);
  EXPECT_EQ(L.down_bias.size(), 16u);
  EXPECT_EQ(l.weights.lm_head.data, l.weights.embed_tokens.data);
  expect_tiny_values(l.weights, written);
}

TEST(ModelFilesWeights, ExtraTensorsAreAccepted) {
  auto dir = test::scratch_dir("extra");
  auto config = test::tiny_config("llama");
  config["tie_word_embeddings"] = true;
  auto tensors = test::tiny_tensors(config, DType::f32);
  tensors.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", DType::f32, {4},
                     test::encode({1, 2, 3, 4}, DType::f32)});
  // A tied checkpoint may still store lm_head.weight; transformers ignores it, so do we.
  tensors.push_back({"lm_head.weight", DType::f32, {32, 16},
                     test::encode(std::vector<float>(32 * 16, 1.0f), DType::f32)});
  test::write_json(dir / "config.json", config);
  test::write_safetensors(dir / "model.safetensors", tensors);
  auto l = load(dir);
  EXPECT_EQ(l.weights.lm_head.data, l.weights.embed_tokens.data);
}

TEST(ModelFilesWeights, MisalignedMatrixIsCopied) {
  auto dir = test::scratch_dir("misaligned");
  auto config = test::tiny_config("qwen3");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f32);
  // A 2-byte tensor first shifts every following F32 tensor off 4-byte alignment.
  tensors.insert(tensors.begin(), {"aaa.pad", DType::bf16, {1}, test::encode({0}, DType::bf16)});
  test::write_safetensors(dir / "model.safetensors", tensors);
  auto l = load(dir);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(l.weights.layers[0].q_proj.data) % 4, 0u);
  EXPECT_NE(l.weights.storage.get(), static_cast<const void*>(l.archive.get()));
  tensors.erase(tensors.begin());
  expect_tiny_values(l.weights, tensors);
}

TEST(ModelFilesWeights, ShapeMismatchAgainstConfig) {
  auto dir = test::scratch_dir("shape-mismatch");
  auto config = test::tiny_config("qwen3");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f32);
  for (auto& t : tensors)
    if (t.name == "model.layers.1.mlp.up_proj.weight") {
      t.shape = {20, 16};
      t.bytes.resize(20 * 16 * 4);
    }
  test::write_safetensors(dir / "model.safetensors", tensors);
  auto config_parsed = ModelConfig::from_dir(dir);
  auto archive = SafetensorsArchive::open(dir);
  expect_error([&] { load_weights(config_parsed, archive); }, ErrorCode::corrupt_file,
               {"model.layers.1.mlp.up_proj.weight: shape [24, 16] expected, [20, 16] in " +
                (dir / "model.safetensors").string()});
}

TEST(ModelFilesWeights, ConfigDisagreesWithVendoredCheckpoint) {
  auto dir = test::scratch_dir("wrong-config");
  auto config = nlohmann::json::parse(
      std::ifstream(test::model_dir("demo-draft") / "config.json"));
  config["intermediate_size"] = 1000;
  test::write_json(dir / "config.json", config);
  auto archive = SafetensorsArchive::open(test::model_dir("demo-draft"));
  expect_error([&] { load_weights(ModelConfig::from_dir(dir), archive); },
               ErrorCode::corrupt_file, {"mlp.", "expected", "model.safetensors"});
}

TEST(ModelFilesWeights, MissingTensor) {
  auto dir = test::scratch_dir("missing-tensor");
  auto config = test::tiny_config("qwen3");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f32);
  std::erase_if(tensors,
                [](const auto& t) { return t.name == "model.layers.1.self_attn.k_norm.weight"; });
  test::write_safetensors(dir / "model.safetensors", tensors);
  expect_error([&] { load(dir); }, ErrorCode::not_found,
               {"model.layers.1.self_attn.k_norm.weight", dir.string()});
}

TEST(ModelFilesWeights, MissingUntiedLmHead) {
  auto dir = test::scratch_dir("missing-lm-head");
  auto config = test::tiny_config("llama");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f32);
  std::erase_if(tensors, [](const auto& t) { return t.name == "lm_head.weight"; });
  test::write_safetensors(dir / "model.safetensors", tensors);
  expect_error([&] { load(dir); }, ErrorCode::not_found, {"lm_head.weight", dir.string()});
}

TEST(ModelFilesWeights, IntegerMatrixUnsupported) {
  auto dir = test::scratch_dir("int-matrix");
  auto config = test::tiny_config("qwen3");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f32);
  tensors[0].dtype = DType::i32;  // model.embed_tokens.weight, same byte size
  test::write_safetensors(dir / "model.safetensors", tensors);
  expect_error([&] { load(dir); }, ErrorCode::unsupported,
               {"model.embed_tokens.weight", "I32", "model.safetensors"});
}

TEST(ModelFilesWeights, NullArchive) {
  auto config = ModelConfig::from_dir(test::model_dir("demo-draft"));
  expect_error([&] { load_weights(config, nullptr); }, ErrorCode::invalid_argument, {"archive"});
}

}  // namespace
}  // namespace specpipe
