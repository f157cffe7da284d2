#pragma once
/// The MLP's SiLU gate on the device (internal to kernels/cuda and model/cuda): one
/// expression shared by the row kernels and the GEMM epilogue, so they give the same bits
/// (and the CPU's cpu::silu_gate computes the same formula).
#include <cuda_runtime.h>

namespace specpipe::cuda::detail {

/// silu(gate) * up = gate / (1 + e^-gate) * up.
__device__ inline float silu_gate_value(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

}  // namespace specpipe::cuda::detail
