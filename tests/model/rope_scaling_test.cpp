// RoPE scaling (linear, llama3, yarn) against Hugging Face: config.json parsed as HF
// writes it, then inv_freq, the attention factor and cos / sin far into the context
// compared with what transformers itself computed (tests/data/rope-scaling-hf.json, made
// by tools/gpu/hf_rope_reference.py on a machine with transformers).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "kernels/cpu/rope.h"
#include "model/config.h"
#include "tests/model/model_files_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

using nlohmann::json;

const json& reference() {
  static const json data = [] {
    std::ifstream in(test::data_path("rope-scaling-hf.json"));
    return json::parse(in);
  }();
  return data;
}

/// The case's RoPE keys in a config.json of its own, parsed as any checkpoint's.
ModelConfig parse_case(const json& c) {
  json config = c["config"];
  config["vocab_size"] = 256;
  config["intermediate_size"] = 64;
  config["num_hidden_layers"] = 1;
  auto dir = test::scratch_dir("rope");
  test::write_json(dir / "config.json", config);
  return ModelConfig::from_dir(dir);
}

TEST(RopeScaling, FrequenciesAndFactorEqualHuggingFace) {
  const json& data = reference();
  ASSERT_GE(data["cases"].size(), 8u);
  for (const json& c : data["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ModelConfig config = parse_case(c);
    ASSERT_EQ(config.head_dim, c["head_dim"].get<int32_t>());
    EXPECT_STREQ(cpu::to_string(config.rope_scaling.type), c["rope_type"].get<std::string>().c_str());
    const auto want = c["inv_freq"].get<std::vector<float>>();
    const auto got = cpu::rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling,
                                        config.max_position_embeddings);
    ASSERT_EQ(got.size(), want.size());
    // Same float32 steps as transformers. Its pow is vectorised (SLEEF, within an ulp) and
    // ours is libm's, so a base power may differ in the last bit (1 of 64 with theta 1e6):
    // at most one ulp, and rarely.
    int32_t off_by_one = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] == want[i]) continue;
      EXPECT_TRUE(got[i] == std::nextafter(want[i], 0.0f) || got[i] == std::nextafter(want[i], 1.0f))
          << "inv_freq[" << i << "] " << got[i] << " vs " << want[i];
      ++off_by_one;
    }
    EXPECT_LE(off_by_one, 2);
    EXPECT_NEAR(cpu::rope_attention_factor(config.rope_scaling),
                c["attention_factor"].get<double>(), 1e-12);
  }
}

TEST(RopeScaling, TableEqualsHuggingFaceFarIntoTheContext) {
  const json& data = reference();
  const auto positions = data["positions"].get<std::vector<int32_t>>();
  for (const json& c : data["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const ModelConfig config = parse_case(c);
    const int32_t rows = positions.back() + 1;
    const cpu::RopeTable table(config.head_dim, config.rope_theta, rows, config.rope_scaling,
                               config.max_position_embeddings);
    double worst = 0;
    for (size_t p = 0; p < positions.size(); ++p) {
      const auto cos_want = c["cos"][p].get<std::vector<float>>();
      const auto sin_want = c["sin"][p].get<std::vector<float>>();
      for (int32_t i = 0; i < config.head_dim / 2; ++i) {
        // HF's cos is [positions, head_dim] (the half repeated); ours is the half.
        worst = std::max(worst, std::abs(double{table.cos(positions[p])[i]} - cos_want[static_cast<size_t>(i)]));
        worst = std::max(worst, std::abs(double{table.sin(positions[p])[i]} - sin_want[static_cast<size_t>(i)]));
      }
    }
    // cos / sin of one float angle differ by an ulp or two between libm and torch; an
    // inv_freq an ulp apart (above) moves the angle at position 131,071 by ~4e-6 rad.
    EXPECT_LT(worst, 1e-5);
  }
}

// Checks that need no reference: what each scheme promises by construction.
TEST(RopeScaling, SchemesKeepTheirPromises) {
  const auto plain = cpu::rope_inv_freq(128, 500000.0, {}, 131072);
  cpu::RopeScaling linear;
  linear.type = cpu::RopeScaling::Type::linear;
  linear.factor = 4.0;
  const auto lin = cpu::rope_inv_freq(128, 500000.0, linear, 131072);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(lin[i], plain[i] / 4.0f);

  cpu::RopeScaling llama3;
  llama3.type = cpu::RopeScaling::Type::llama3;
  llama3.factor = 8.0;
  llama3.original_max_positions = 8192;
  const auto l3 = cpu::rope_inv_freq(128, 500000.0, llama3, 131072);
  // Short wavelengths (< 8192 / 4) untouched, long ones (> 8192) divided by the factor.
  EXPECT_EQ(l3.front(), plain.front());
  EXPECT_EQ(l3.back(), plain.back() / 8.0f);

  cpu::RopeScaling yarn;
  yarn.type = cpu::RopeScaling::Type::yarn;
  yarn.factor = 4.0;
  EXPECT_NEAR(cpu::rope_attention_factor(yarn), 0.1 * std::log(4.0) + 1.0, 1e-12);
  EXPECT_EQ(cpu::rope_attention_factor({}), 1.0);
  const auto y = cpu::rope_inv_freq(128, 1000000.0, yarn, 32768);
  EXPECT_EQ(y.front(), cpu::rope_inv_freq(128, 1000000.0, {}, 32768).front());  // extrapolated
}

}  // namespace
}  // namespace specpipe
