// The model description the SDK tests create plugins with: a small CPU model.
#pragma once
#include <specpipe/plugin.h>

inline specpipe_model_desc sdk_test_model_desc(int32_t max_gamma = 8) {
  specpipe_model_desc m{};
  m.struct_size = sizeof m;
  m.num_layers = 2;
  m.num_kv_heads = 1;
  m.head_dim = 4;
  m.kv_dim = 4;
  m.block_size = 16;
  m.max_gamma = max_gamma;
  m.max_batch = 4;
  m.device = {kDLCPU, 0};
  return m;
}
