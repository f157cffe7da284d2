#pragma once
/// Vector shared-memory loads and stores of 2 or 4 floats (internal to the attention
/// kernels that keep a lane's dims side by side: prefill, the window kernel's tight build).
#include <cuda_runtime.h>

namespace specpipe::cuda::attention_detail {

/// kN (2 or 4) floats of shared memory at p (4 * kN-byte aligned), one load.
template <int kN>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[kN]) {
  static_assert(kN == 2 || kN == 4);
  if constexpr (kN == 4) {
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  } else {
    const float2 x = *reinterpret_cast<const float2*>(p);
    v[0] = x.x, v[1] = x.y;
  }
}

/// kN (2 or 4) floats to shared memory at p (4 * kN-byte aligned), one store.
template <int kN>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[kN]) {
  static_assert(kN == 2 || kN == 4);
  if constexpr (kN == 4) *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  else *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
}

}  // namespace specpipe::cuda::attention_detail
