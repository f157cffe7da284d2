#pragma once
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace specpipe::cpu {

/// out[i, :] = table[tokens[i], :] as float32. table: [vocab, dim] in `dtype`; read.
/// out: [tokens.size(), ld_out] written. Throws Error(invalid_argument) for an id
/// outside [0, vocab).
void embedding(DType dtype, const void* table, int64_t vocab, int64_t dim,
               std::span<const int32_t> tokens, float* out, int64_t ld_out);

}  // namespace specpipe::cpu
