#pragma once
/// Loading a checkpoint directory into a ready-to-run Transformer.
#include <filesystem>
#include <memory>

#include "model/transformer.h"

namespace specpipe {

/// config.json + safetensors (single or sharded) -> Transformer. Throws specpipe::Error
/// naming the file, tensor or key at fault.
std::unique_ptr<Transformer> load_transformer(const std::filesystem::path& model_dir);

/// Resolves a model argument: an existing directory is used as is; a bare name such as
/// "demo-target" is looked up in $SPECPIPE_MODELS, then in the project's models/ folder.
/// Throws Error(not_found) listing where it looked.
std::filesystem::path resolve_model_dir(const std::string& name_or_path);

}  // namespace specpipe
