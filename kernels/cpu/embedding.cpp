#include "kernels/cpu/embedding.h"

#include <cstring>

#include "core/error.h"

namespace specpipe::cpu {

void embedding(DType dtype, const void* table, int64_t vocab, int64_t dim,
               std::span<const int32_t> tokens, float* out, int64_t ld_out) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int64_t id = tokens[i];
    if (id < 0 || id >= vocab)
      fail(ErrorCode::invalid_argument, "token id {} outside the vocabulary [0, {})", id, vocab);
    float* row = out + static_cast<int64_t>(i) * ld_out;
    if (dtype == DType::f32) {
      std::memcpy(row, static_cast<const float*>(table) + id * dim, static_cast<size_t>(dim) * 4);
      continue;
    }
    const uint16_t* src = static_cast<const uint16_t*>(table) + id * dim;
    for (int64_t d = 0; d < dim; ++d)
      row[d] = dtype == DType::bf16 ? bf16_to_f32(src[d]) : f16_to_f32(src[d]);
  }
}

}  // namespace specpipe::cpu
