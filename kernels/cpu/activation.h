#pragma once
#include <cstdint>

namespace specpipe::cpu {

/// SwiGLU: out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)); element-wise over
/// rows of `n` (gate, up read; out written, may alias gate).
void silu_gate(const float* gate, const float* up, float* out, int64_t rows, int64_t n,
               int64_t ld);

}  // namespace specpipe::cpu
