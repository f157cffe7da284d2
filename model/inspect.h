#pragma once
/// A description of a checkpoint on disk, for `specpipe inspect` and for humans.
#include <nlohmann/json.hpp>

#include <filesystem>

namespace specpipe {

/// Describes the checkpoint in `model_dir` as JSON:
/// ```
/// { "model_dir": str,
///   "config": { model_type, family, vocab_size, hidden_size, intermediate_size,
///               num_layers, num_heads, num_kv_heads, head_dim, max_position_embeddings,
///               rope_theta, rms_norm_eps, tie_word_embeddings, qk_norm, attention_bias,
///               o_proj_bias, mlp_bias, eos_token_ids, weight_dtype },
///   "parameters": int,            // elements over all stored tensors (tied lm_head once)
///   "tensor_bytes": int,
///   "bytes_by_dtype": { "BF16": int, ... },
///   "tensors": [ { name, dtype, shape, file, bytes } ],   // by name; file relative
///   "files": [ { name, bytes } ],                          // regular files of model_dir
///   "weights": { "ok": true, "bytes_read_per_token": int, "tied_lm_head": bool }
///           or { "ok": false, "code": str, "error": str } }
/// ```
/// Throws Error as ModelConfig::from_dir and SafetensorsArchive::open do. A checkpoint
/// whose tensors do not match its config is still described, the reason under "weights".
nlohmann::json inspect_checkpoint(const std::filesystem::path& model_dir);

}  // namespace specpipe
