#pragma once
/// Programmatic dependent launch (sm_90; internal to kernels/cuda and model/cuda).
///
/// Decode is a chain of short kernels, each waiting for the one before to drain. A kernel
/// launched with cudaLaunchAttributeProgrammaticStreamSerialization (launch_dependent) may
/// be scheduled while the kernel before it still runs, once that one called
/// allow_dependent_launch(): its launch latency is hidden, and a GEMM loads its first
/// weights (which nothing before it writes) before it waits for the earlier results.
/// Such a kernel must not read or write what other kernels touch before
/// wait_for_prerequisite_grid(). Both device calls are no-ops in kernels launched plainly.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace specpipe::cuda::detail {

/// Lets the next kernel on the stream, if it was launched as a programmatic dependent,
/// start now (it still waits for this grid's writes in wait_for_prerequisite_grid).
__device__ inline void allow_dependent_launch() { asm volatile("griddepcontrol.launch_dependents;" :::); }

/// Waits until the grids this one depends on have finished and their writes are visible.
__device__ inline void wait_for_prerequisite_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/// The start of a row kernel of the forward: let the next kernel be scheduled, then wait
/// for the previous one (all of this kernel's reads and writes come after).
__device__ inline void begin_dependent_kernel() {
  allow_dependent_launch();
  wait_for_prerequisite_grid();
}

/// SPECPIPE_CUDA_PDL=0 in the environment launches every kernel plainly (for bisecting a
/// suspected ordering problem; read once).
inline bool pdl_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SPECPIPE_CUDA_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

/// kernel<<<grid, block, shared_bytes, stream>>>(args...), as a programmatic dependent of
/// the kernel before it on the stream when `dependent` (the kernel must wait as described
/// above).
template <class... Params, class... Args>
cudaError_t launch_dependent_shared(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                                    cudaStream_t stream, bool dependent, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = dependent && pdl_enabled() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// The same without dynamic shared memory.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, bool dependent,
                             Args&&... args) {
  return launch_dependent_shared(kernel, grid, block, 0, stream, dependent, std::forward<Args>(args)...);
}

}  // namespace specpipe::cuda::detail
