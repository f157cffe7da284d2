#pragma once
/// BF16 bit conversions on the device (internal to kernels/cuda and model/cuda), the same
/// rounding as the host's f32_to_bf16 (core/dtype.h) so both sides produce equal bits.
#include <cuda_runtime.h>

#include <cstdint>

namespace specpipe::cuda::detail {

__device__ inline float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

/// Round to nearest even; a NaN stays a NaN.
__device__ inline uint16_t f32_to_bf16_rne(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// 8 BF16 values (one 16-byte load) -> 8 floats, in order.
__device__ inline void widen8(uint4 bits, float* out) {
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

}  // namespace specpipe::cuda::detail
