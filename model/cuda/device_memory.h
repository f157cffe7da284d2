#pragma once
/// CUDA memory that frees itself and the status checks of the CUDA forward
/// (model/cuda/ internals; not part of CudaTransformer's interface).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/error.h"

namespace specpipe::cuda {

/// Throws Error(internal) "CUDA forward: <what>: <CUDA's message>" unless cudaSuccess.
inline void cuda_try(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(ErrorCode::internal, "CUDA forward: {}: {}", what, cudaGetErrorString(status));
}
/// v rounded up to a multiple of a.
inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/// The same as cuda_try for a cuBLASLt status.
inline void lt_try(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fail(ErrorCode::internal, "CUDA forward: {}: cuBLASLt status {}", what, static_cast<int>(status));
}

/// Device memory (cudaMalloc) or pinned host memory (cudaMallocHost) that frees itself.
/// `total`, when given, accumulates the bytes allocated.
template <cudaError_t (*Alloc)(void**, size_t), cudaError_t (*Free)(void*)>
class CudaMemory {
 public:
  CudaMemory() = default;
  ~CudaMemory() { reset(); }
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  void allocate(size_t bytes, size_t* total = nullptr) {
    reset();
    if (bytes == 0) return;
    cuda_try(Alloc(&ptr_, bytes), "allocation");
    bytes_ = bytes;
    if (total) *total += bytes;
  }
  void reset() {
    if (ptr_) Free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};
using DeviceBuffer = CudaMemory<::cudaMalloc, ::cudaFree>;
using PinnedBuffer = CudaMemory<::cudaMallocHost, ::cudaFreeHost>;

}  // namespace specpipe::cuda
