#pragma once
// The model shape the forward-plan tests plan for: 2 layers, 4 query heads over 2 KV
// heads of 8 dims, 256 positions. Only the shape matters (no weights).
#include "model/config.h"

namespace specpipe::cuda {

inline ModelConfig small_plan_config() {
  ModelConfig c;
  c.vocab_size = 100;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 256;
  return c;
}

}  // namespace specpipe::cuda
