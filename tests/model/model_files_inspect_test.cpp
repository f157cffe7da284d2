// inspect_checkpoint: the JSON summary `specpipe inspect` prints.
#include <gtest/gtest.h>

#include <set>

#include "model/inspect.h"
#include "tests/model/model_files_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

TEST(ModelFilesInspect, DemoTarget) {
  auto info = inspect_checkpoint(test::model_dir("demo-target"));
  EXPECT_EQ(info["config"]["model_type"], "qwen3");
  EXPECT_EQ(info["config"]["num_layers"], 8);
  EXPECT_EQ(info["config"]["weight_dtype"], "BF16");
  EXPECT_EQ(info["parameters"], 15736192);  // the index's metadata.total_parameters
  EXPECT_EQ(info["bytes_by_dtype"]["BF16"], 31472384);
  EXPECT_EQ(info["tensor_bytes"], 31472384);
  EXPECT_EQ(info["tensors"].size(), 8u * 11 + 2);
  EXPECT_EQ(info["tensors"][0]["name"], "model.embed_tokens.weight");
  EXPECT_EQ(info["tensors"][0]["shape"], nlohmann::json({8192, 384}));
  EXPECT_EQ(info["tensors"][0]["file"], "model-00001-of-00003.safetensors");
  std::set<std::string> files;
  for (const auto& f : info["files"]) files.insert(f["name"].get<std::string>());
  EXPECT_TRUE(files.contains("model-00003-of-00003.safetensors"));
  EXPECT_TRUE(files.contains("config.json"));
  EXPECT_TRUE(files.contains("tokenizer.json"));
  EXPECT_EQ(info["weights"]["ok"], true);
  EXPECT_EQ(info["weights"]["tied_lm_head"], true);
}

TEST(ModelFilesInspect, ReportsWeightMismatchWithoutThrowing) {
  auto dir = test::scratch_dir("inspect-bad");
  auto config = test::tiny_config("llama");
  test::write_json(dir / "config.json", config);
  auto tensors = test::tiny_tensors(config, DType::f16);
  tensors.pop_back();  // lm_head.weight
  test::write_safetensors(dir / "model.safetensors", tensors);
  auto info = inspect_checkpoint(dir);
  EXPECT_EQ(info["weights"]["ok"], false);
  EXPECT_EQ(info["weights"]["code"], "not_found");
  EXPECT_NE(info["weights"]["error"].get<std::string>().find("lm_head.weight"), std::string::npos);
  EXPECT_EQ(info["bytes_by_dtype"].size(), 1u);
  EXPECT_TRUE(info["bytes_by_dtype"].contains("F16"));
}

TEST(ModelFilesInspect, MissingConfigThrows) {
  auto dir = test::scratch_dir("inspect-empty");
  test::expect_error([&] { inspect_checkpoint(dir); }, ErrorCode::not_found, {"config.json"});
}

}  // namespace
}  // namespace specpipe
