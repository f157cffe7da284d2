// Safetensors archives: single-file and sharded, and every malformed file we refuse.
// Each error must name the file (and the tensor where there is one), never crash.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "model/safetensors.h"
#include "tests/model/model_files_support.h"
#include "tests/support/test_paths.h"

namespace specpipe {
namespace {

using test::expect_error;

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

/// A copy of the demo-draft checkpoint in a scratch dir, for damaging.
std::filesystem::path copy_of_demo_draft() {
  auto dir = test::scratch_dir("draft-copy");
  for (const auto& entry : std::filesystem::directory_iterator(test::model_dir("demo-draft")))
    std::filesystem::copy_file(entry.path(), dir / entry.path().filename());
  return dir;
}

TEST(ModelFilesSafetensors, SingleFileDemoDraft) {
  auto dir = test::model_dir("demo-draft");
  auto archive = SafetensorsArchive::open(dir);
  EXPECT_EQ(archive->location(), dir);
  EXPECT_EQ(archive->tensors().size(), 24u);
  const TensorEntry& embed = archive->get("model.embed_tokens.weight");
  EXPECT_EQ(embed.dtype, DType::bf16);
  EXPECT_EQ(embed.shape, (std::vector<int64_t>{8192, 256}));
  EXPECT_EQ(embed.numel(), 8192 * 256);
  EXPECT_EQ(embed.nbytes, 8192u * 256 * 2);
  EXPECT_EQ(embed.file, dir / "model.safetensors");
  EXPECT_EQ(archive->find("lm_head.weight"), nullptr);
  // The whole data section is tensors: 7345680 bytes - 8 - 2568 header bytes.
  EXPECT_EQ(archive->total_bytes(), 7345680u - 8 - 2568);
}

TEST(ModelFilesSafetensors, ShardedDemoTarget) {
  auto dir = test::model_dir("demo-target");
  auto archive = SafetensorsArchive::open(dir);
  EXPECT_EQ(archive->total_bytes(), 31472384u);  // the index's metadata.total_size
  EXPECT_EQ(archive->get("model.embed_tokens.weight").file,
            dir / "model-00001-of-00003.safetensors");
  std::set<std::filesystem::path> files;
  for (const auto& [name, entry] : archive->tensors()) files.insert(entry.file.filename());
  EXPECT_EQ(files.size(), 3u);
}

TEST(ModelFilesSafetensors, I32AndI64AreParsed) {
  auto dir = test::scratch_dir("ints");
  test::write_safetensors(dir / "model.safetensors",
                          {{"a", DType::i32, {3}, zeros(12)}, {"b", DType::i64, {2, 1}, zeros(16)},
                           {"empty", DType::f32, {0, 4}, {}}});
  auto archive = SafetensorsArchive::open(dir);
  EXPECT_EQ(archive->get("a").dtype, DType::i32);
  EXPECT_EQ(archive->get("b").nbytes, 16u);
  EXPECT_EQ(archive->get("empty").numel(), 0);
}

TEST(ModelFilesSafetensors, MissingCheckpoint) {
  auto dir = test::scratch_dir("empty-ckpt");
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::not_found,
               {dir.string(), "model.safetensors"});
  expect_error([&] { SafetensorsArchive::open(dir / "nope"); }, ErrorCode::not_found,
               {(dir / "nope").string()});
}

TEST(ModelFilesSafetensors, GetMissingTensorNamesCheckpoint) {
  auto dir = test::model_dir("demo-draft");
  auto archive = SafetensorsArchive::open(dir);
  expect_error([&] { archive->get("model.layers.9.mlp.up_proj.weight"); }, ErrorCode::not_found,
               {"model.layers.9.mlp.up_proj.weight", dir.string()});
}

TEST(ModelFilesSafetensors, TruncatedShard) {
  auto dir = copy_of_demo_draft();
  auto file = dir / "model.safetensors";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) - 100);
  // The last tensor in the file, model.norm.weight (512 bytes), now runs past the end.
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {file.string(), "'model.norm.weight'", "truncated"});
}

TEST(ModelFilesSafetensors, TruncatedInsideHeader) {
  auto dir = copy_of_demo_draft();
  auto file = dir / "model.safetensors";
  std::filesystem::resize_file(file, 100);
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {file.string(), "header length 2568", "past the end"});
  std::filesystem::resize_file(file, 5);
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {file.string(), "too short"});
  std::filesystem::resize_file(file, 0);
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {file.string(), "too short"});
}

TEST(ModelFilesSafetensors, HeaderLengthPastEndOfFile) {
  auto file = test::scratch_dir("hdr-len") / "model.safetensors";
  test::write_raw_safetensors(file, "{}", {}, 1000);
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "header length 1000", "past the end"});
  test::write_raw_safetensors(file, "{}", {}, ~uint64_t{0});
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "past the end"});
}

// A header length inside the file but over the reference implementation's 100 MiB is
// refused before any of it is parsed. The file is sparse: nothing is written or read.
TEST(ModelFilesSafetensors, HeaderLengthOverLimit) {
  auto file = test::scratch_dir("hdr-limit") / "model.safetensors";
  const uint64_t declared = (100u << 20) + 8;
  test::write_raw_safetensors(file, "{}", {}, declared);
  std::filesystem::resize_file(file, 8 + declared);
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), fmt::format("header length {}", declared), "limit"});
}

TEST(ModelFilesSafetensors, HeaderJsonMalformed) {
  auto file = test::scratch_dir("hdr-json") / "model.safetensors";
  test::write_raw_safetensors(file, R"({"w": {"dtype": "F32", "shape": [1], )", zeros(4));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "not well-formed JSON"});
  test::write_raw_safetensors(file, R"({"w": {"dtype": "F32", "shape": [1e999]}})", {});
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "not well-formed JSON"});
  test::write_raw_safetensors(file, "[1, 2]", {});
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "array", "object expected"});
  test::write_raw_safetensors(file, std::string(100000, '['), {});
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string()});
}

TEST(ModelFilesSafetensors, UnknownAndUnsupportedDtype) {
  auto file = test::scratch_dir("dtype") / "model.safetensors";
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 2]}})", zeros(2));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "unknown dtype", "Q4_K"});
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]}})", zeros(2));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::unsupported,
               {file.string(), "'w'", "U8"});
}

TEST(ModelFilesSafetensors, BadShape) {
  auto file = test::scratch_dir("shape") / "model.safetensors";
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]}})", zeros(8));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "-1"});
  test::write_raw_safetensors(file,
                              R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296],)"
                              R"( "data_offsets": [0, 8]}})",
                              zeros(8));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "64 bits"});
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}})", zeros(8));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "'shape'"});
}

TEST(ModelFilesSafetensors, BeginAfterEnd) {
  auto file = test::scratch_dir("begin-end") / "model.safetensors";
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", zeros(8));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "[8, 4]", "begin after end"});
}

TEST(ModelFilesSafetensors, OffsetsNotMatchingShape) {
  auto file = test::scratch_dir("offsets") / "model.safetensors";
  test::write_raw_safetensors(
      file, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 16]}})", zeros(16));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'w'", "16 bytes", "BF16 [2, 3] needs 12"});
}

TEST(ModelFilesSafetensors, OverlappingTensors) {
  auto file = test::scratch_dir("overlap") / "model.safetensors";
  test::write_raw_safetensors(file,
                              R"({"b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]},)"
                              R"( "a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                              zeros(24));
  expect_error([&] { SafetensorsArchive::open_file(file); }, ErrorCode::corrupt_file,
               {file.string(), "'a' [0, 16]", "'b' [8, 24]", "overlap"});
}

TEST(ModelFilesSafetensors, IndexNamesMissingShard) {
  auto dir = test::scratch_dir("missing-shard");
  test::write_sharded(dir, {{"x", DType::f32, {2}, zeros(8)}, {"y", DType::f32, {2}, zeros(8)}},
                      2);
  std::filesystem::remove(dir / "model-00002-of-00002.safetensors");
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::not_found,
               {"model.safetensors.index.json", "model-00002-of-00002.safetensors", "'y'"});
}

TEST(ModelFilesSafetensors, IndexTensorMissingFromItsShard) {
  auto dir = test::scratch_dir("index-missing");
  test::write_sharded(dir, {{"x", DType::f32, {2}, zeros(8)}, {"y", DType::f32, {2}, zeros(8)}},
                      2);
  test::write_safetensors(dir / "model-00002-of-00002.safetensors",
                          {{"z", DType::f32, {2}, zeros(8)}});
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {"model.safetensors.index.json", "'y'", "model-00002-of-00002.safetensors"});
}

TEST(ModelFilesSafetensors, SameTensorInTwoShards) {
  auto dir = test::scratch_dir("dup");
  test::write_sharded(dir, {{"x", DType::f32, {2}, zeros(8)}, {"y", DType::f32, {2}, zeros(8)}},
                      2);
  test::write_safetensors(dir / "model-00002-of-00002.safetensors",
                          {{"x", DType::f32, {2}, zeros(8)}, {"y", DType::f32, {2}, zeros(8)}});
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {"'x'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST(ModelFilesSafetensors, IndexMalformed) {
  auto dir = test::scratch_dir("index-bad");
  std::ofstream(dir / "model.safetensors.index.json") << "{\"weight_map\": {";
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {"model.safetensors.index.json", "malformed JSON"});
  test::write_json(dir / "model.safetensors.index.json", {{"metadata", {}}});
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {"model.safetensors.index.json", "'weight_map'"});
  test::write_json(dir / "model.safetensors.index.json",
                   {{"weight_map", {{"x", "../elsewhere.safetensors"}}}});
  expect_error([&] { SafetensorsArchive::open(dir); }, ErrorCode::corrupt_file,
               {"model.safetensors.index.json", "'x'", "../elsewhere.safetensors"});
}

}  // namespace
}  // namespace specpipe
