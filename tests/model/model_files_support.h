#pragma once
/// Helpers for the model-files tests: a small safetensors writer, tiny hand-built
/// checkpoints, and a check that a call throws the expected specpipe::Error.
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace specpipe::test {

/// One tensor to write: its name, safetensors dtype, shape and raw little-endian bytes.
struct TensorSpec {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

/// `values` encoded as `dtype` (F32, F16 or BF16).
std::vector<std::byte> encode(const std::vector<float>& values, DType dtype);

/// Writes a well-formed safetensors file: header padded to 8 bytes, tensors in order.
void write_safetensors(const std::filesystem::path& file, const std::vector<TensorSpec>& tensors);

/// Writes the 8-byte length of `header`, `header` itself and `data`, unchecked: for
/// building malformed files. `declared_length` overrides the length field if set.
void write_raw_safetensors(const std::filesystem::path& file, const std::string& header,
                           const std::vector<std::byte>& data, uint64_t declared_length = 0);

/// Spreads `tensors` over `num_shards` files `model-0000i-of-0000n.safetensors` (round
/// robin) and writes `model.safetensors.index.json` naming them.
void write_sharded(const std::filesystem::path& dir, const std::vector<TensorSpec>& tensors,
                   int num_shards);

void write_json(const std::filesystem::path& file, const nlohmann::json& value);

/// A small qwen3-style config.json body (vocab 32, hidden 16, 2 layers, 4 heads of 8,
/// 2 kv heads, intermediate 24); tests edit it to cover other families and bad input.
nlohmann::json tiny_config(const std::string& model_type = "qwen3");

/// Every tensor the config implies, with deterministic values that are exact in F16 and
/// BF16 (multiples of 1/8 in [-4, 4)). Honours tie_word_embeddings, QK-norm (qwen3),
/// q/k/v biases (qwen2, or attention_bias), o_proj bias and mlp_bias (llama).
std::vector<TensorSpec> tiny_tensors(const nlohmann::json& config, DType dtype);

/// The float values tiny_tensors() wrote for tensor number `index` (its position there).
std::vector<float> tiny_values(size_t index, int64_t numel);

/// Writes config.json and a single model.safetensors for `config`; returns the tensors.
std::vector<TensorSpec> write_tiny_checkpoint(const std::filesystem::path& dir,
                                              const nlohmann::json& config, DType dtype);

/// Runs `fn`; it must throw specpipe::Error with `code` and a message containing each of
/// `needles`. Returns the message (records a test failure otherwise).
std::string expect_error(const std::function<void()>& fn, ErrorCode code,
                         std::initializer_list<std::string> needles);

}  // namespace specpipe::test
