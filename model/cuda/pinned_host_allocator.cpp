#include "model/cuda/pinned_host_allocator.h"

#include <cuda_runtime_api.h>

#include <fmt/format.h>

namespace specpipe::cuda {

void* PinnedHostAllocator::allocate(size_t bytes) {
  void* memory = nullptr;
  // Portable: any device's copy stream may read it (a pipeline's models may sit on
  // different devices).
  const cudaError_t status = cudaHostAlloc(&memory, bytes == 0 ? 1 : bytes, cudaHostAllocPortable);
  if (status == cudaSuccess) return memory;
  cudaGetLastError();  // a refused allocation is an answer here, not a sticky error
  const std::lock_guard lock(mutex_);
  last_error_ = cudaGetErrorString(status);
  return nullptr;
}

void PinnedHostAllocator::release(void* memory, size_t /*bytes*/) {
  if (memory) cudaFreeHost(memory);
}

std::string PinnedHostAllocator::failure(size_t bytes) const {
  const std::lock_guard lock(mutex_);
  return fmt::format("{} bytes of host memory that cannot be pinned (cudaHostAlloc: {})", bytes,
                     last_error_.empty() ? "no error recorded" : last_error_);
}

PinnedHostAllocator& pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return allocator;
}

}  // namespace specpipe::cuda
