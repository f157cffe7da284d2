#pragma once
/// Named shapes of real models for synthetic runs (CudaTransformer::random: seeded random
/// BF16 weights, real shapes), as the GPU tools name them (--synthetic NAME).
#include <string>

#include "model/config.h"

namespace specpipe::gpu_tool {

/// "llama3-8b" (Llama-3-8B, 8,192 positions), "llama3.1-8b" (Llama-3.1-8B: 131,072
/// positions, llama3 RoPE scaling), "llama3-1b" (Llama-3.2-1B), "qwen3-0.6b", "qwen3-4b",
/// "qwen3-8b" (40,960 positions): each checkpoint's config.json values. Throws
/// Error(invalid_argument) otherwise. A tool that runs a context past the positions raises
/// max_position_embeddings itself and says so in its report.
ModelConfig synthetic_model_config(const std::string& name);
/// The names above, comma-separated, for help texts and errors.
std::string synthetic_model_names();

}  // namespace specpipe::gpu_tool
