#pragma once
/// Named shapes of real models for synthetic runs (CudaTransformer::random: seeded random
/// BF16 weights, real shapes), as the GPU tools name them (--synthetic NAME).
#include <string>

#include "model/config.h"

namespace specpipe::gpu_tool {

/// "llama3-8b" (Llama-3-8B), "qwen3-0.6b" (Qwen3-0.6B), "llama3-1b" (Llama-3.2-1B).
/// Throws Error(invalid_argument) otherwise.
ModelConfig synthetic_model_config(const std::string& name);

}  // namespace specpipe::gpu_tool
