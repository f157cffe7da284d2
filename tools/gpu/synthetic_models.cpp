// Named synthetic model shapes (synthetic_models.h).
#include "tools/gpu/synthetic_models.h"

#include "core/dtype.h"
#include "core/error.h"

namespace specpipe::gpu_tool {

ModelConfig synthetic_model_config(const std::string& name) {
  ModelConfig c;
  if (name == "llama3-8b") {
    c.family = ModelFamily::llama;
    c.model_type = "llama";
    c.vocab_size = 128256;
    c.hidden_size = 4096;
    c.intermediate_size = 14336;
    c.num_layers = 32;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-5f;
  } else if (name == "llama3-1b") {
    c.family = ModelFamily::llama;
    c.model_type = "llama";
    c.vocab_size = 128256;
    c.hidden_size = 2048;
    c.intermediate_size = 8192;
    c.num_layers = 16;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 64;
    c.max_position_embeddings = 8192;
    c.rope_theta = 500000.0;
    c.rms_norm_eps = 1e-5f;
    c.tie_word_embeddings = true;
  } else if (name == "qwen3-0.6b") {
    c.family = ModelFamily::qwen3;
    c.model_type = "qwen3";
    c.vocab_size = 151936;
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_layers = 28;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.max_position_embeddings = 8192;  // the model has 40960; the RoPE table is sized from this
    c.rope_theta = 1000000.0;
    c.rms_norm_eps = 1e-6f;
    c.tie_word_embeddings = true;
    c.qk_norm = true;
  } else {
    fail(ErrorCode::invalid_argument, "no synthetic model named '{}' (llama3-8b, llama3-1b, qwen3-0.6b)", name);
  }
  c.weight_dtype = DType::bf16;
  return c;
}

}  // namespace specpipe::gpu_tool
