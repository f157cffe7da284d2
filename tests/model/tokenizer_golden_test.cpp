// The tokenizer against reference ids produced by Hugging Face tokenizers: the golden
// prompts (tests/data/golden-*.json) and a fuzz set of random strings
// (tests/data/tokenizer-fuzz.json, written by model/tokenizer/tools/make_fuzz_reference.py).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/timer.h"
#include "model/tokenizer/tokenizer.h"
#include "tests/support/golden.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

const Tokenizer& demo_tokenizer() {
  static const Tokenizer tokenizer =
      Tokenizer::from_file(test::model_dir("demo-target") / "tokenizer.json");
  return tokenizer;
}

void expect_round_trip(const std::string& text, const std::vector<int32_t>& golden_ids,
                       const std::string& label) {
  const std::vector<int32_t> ids = demo_tokenizer().encode(text);
  EXPECT_EQ(ids, golden_ids) << label;
  EXPECT_EQ(demo_tokenizer().decode(golden_ids), text) << label;
}

TEST(TokenizerGolden, TokenizerCasesEncodeAndDecode) {
  const auto& cases = test::golden_public()["tokenizer"];
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_round_trip(cases[i]["text"].get<std::string>(), test::ids(cases[i]["ids"]),
                      "tokenizer case " + std::to_string(i));
  }
}

TEST(TokenizerGolden, PublicPromptsEncodeAndDecode) {
  const auto& cases = test::golden_public()["cases"];
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_round_trip(cases[i]["prompt"].get<std::string>(), test::ids(cases[i]["prompt_ids"]),
                      "golden-public case " + std::to_string(i));
  }
}

TEST(TokenizerGolden, LongPromptsEncodeAndDecode) {
  const auto& cases = test::golden_long()["cases"];
  ASSERT_FALSE(cases.empty());
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_round_trip(cases[i]["prompt"].get<std::string>(), test::ids(cases[i]["prompt_ids"]),
                      "golden-long case " + std::to_string(i));
  }
}

TEST(TokenizerGolden, AllThreeModelsShareTheTokenizer) {
  const std::string text = test::golden_public()["cases"][0]["prompt"].get<std::string>();
  for (const char* model : {"demo-draft", "llama-tiny-random"}) {
    const Tokenizer other = Tokenizer::from_file(test::model_dir(model) / "tokenizer.json");
    EXPECT_EQ(other.encode(text), demo_tokenizer().encode(text)) << model;
  }
}

TEST(TokenizerGolden, HuggingFaceFuzzReference) {
  std::ifstream in(test::data_path("tokenizer-fuzz.json"));
  ASSERT_TRUE(in) << "tests/data/tokenizer-fuzz.json is missing";
  const nlohmann::json reference = nlohmann::json::parse(in);
  const auto& cases = reference["cases"];
  ASSERT_GE(cases.size(), 100u);
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string text = cases[i]["text"].get<std::string>();
    const std::vector<int32_t> expected = test::ids(cases[i]["ids"]);
    EXPECT_EQ(demo_tokenizer().encode(text), expected) << "fuzz case " << i;
    // "decoded" is present only where normalisation changed the text.
    EXPECT_EQ(demo_tokenizer().decode(expected), cases[i].value("decoded", text))
        << "fuzz case " << i;
  }
}

TEST(TokenizerGolden, LongPromptEncodesInMilliseconds) {
  const auto& longest = test::golden_long()["cases"].back();
  const std::string text = longest["prompt"].get<std::string>();
  const Tokenizer fresh = Tokenizer::from_file(test::model_dir("demo-target") / "tokenizer.json");
  Stopwatch cold;
  const std::vector<int32_t> ids = fresh.encode(text);
  const double cold_ms = cold.elapsed_ms();
  Stopwatch warm;
  EXPECT_EQ(fresh.encode(text), ids);
  const double warm_ms = warm.elapsed_ms();
  std::printf("encode of %zu tokens (%zu bytes): %.2f ms cold cache, %.2f ms warm\n", ids.size(),
              text.size(), cold_ms, warm_ms);
  // Generous bounds (sanitizer builds, a loaded 2-core machine); the figure printed
  // above is the one to watch.
  EXPECT_LT(cold_ms, 2000.0);
}

}  // namespace
}  // namespace specpipe
