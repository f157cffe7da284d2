#include "model/cuda/pinned_host_allocator.h"

#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

namespace specpipe::cuda {
namespace {

/// Pieces a large fallback registration is pinned in: one huge cudaHostRegister may fail
/// where pieces of it succeed (the driver pins a range at a time).
constexpr size_t kPinChunk = size_t{4} << 30;

}  // namespace

void* PinnedHostAllocator::allocate(size_t bytes) {
  void* memory = nullptr;
  bytes = bytes == 0 ? 1 : bytes;
  // Portable: any device's copy stream may read it (a pipeline's models may sit on
  // different devices).
  cudaError_t status = cudaHostAlloc(&memory, bytes, cudaHostAllocPortable);
  if (status == cudaSuccess) return memory;
  cudaGetLastError();  // a refused allocation is an answer here, not a sticky error
  std::string why = fmt::format("cudaHostAlloc: {}", cudaGetErrorString(status));
  // Large tiers: anonymous pages registered with the driver, whole or in kPinChunk pieces
  // (a copy that spans two pieces is still correct; the driver may stage it).
  // Never more than the machine's memory (pinning it all would take the system down first).
  const auto physical = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (bytes > kPinChunk && bytes < physical) {
    void* pages = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (pages != MAP_FAILED) {
      status = cudaHostRegister(pages, bytes, cudaHostRegisterPortable);
      if (status == cudaSuccess) {
        const std::lock_guard lock(mutex_);
        registered_[pages] = {bytes, 1};
        return pages;
      }
      cudaGetLastError();
      size_t done = 0;
      for (; done < bytes; done += kPinChunk) {
        status = cudaHostRegister(static_cast<char*>(pages) + done, std::min(kPinChunk, bytes - done),
                                  cudaHostRegisterPortable);
        if (status != cudaSuccess) break;
      }
      if (done >= bytes) {
        const std::lock_guard lock(mutex_);
        registered_[pages] = {bytes, kPinChunk};
        return pages;
      }
      cudaGetLastError();
      why += fmt::format("; cudaHostRegister in {} GiB pieces: {} after {} bytes", kPinChunk >> 30,
                         cudaGetErrorString(status), done);
      for (size_t at = 0; at < done; at += kPinChunk) cudaHostUnregister(static_cast<char*>(pages) + at);
      munmap(pages, bytes);
    } else {
      why += "; mmap failed";
    }
  }
  const std::lock_guard lock(mutex_);
  last_error_ = why;
  return nullptr;
}

void PinnedHostAllocator::release(void* memory, size_t /*bytes*/) {
  if (!memory) return;
  Registration r{};
  {
    const std::lock_guard lock(mutex_);
    const auto it = registered_.find(memory);
    if (it != registered_.end()) {
      r = it->second;
      registered_.erase(it);
    }
  }
  if (r.bytes == 0) {
    cudaFreeHost(memory);
    return;
  }
  const size_t piece = r.piece == 1 ? r.bytes : r.piece;
  for (size_t at = 0; at < r.bytes; at += piece) cudaHostUnregister(static_cast<char*>(memory) + at);
  munmap(memory, r.bytes);
}

std::string PinnedHostAllocator::failure(size_t bytes) const {
  const std::lock_guard lock(mutex_);
  return fmt::format("{} bytes of host memory that cannot be pinned ({})", bytes,
                     last_error_.empty() ? "no error recorded" : last_error_);
}

PinnedHostAllocator& pinned_host_allocator() {
  static PinnedHostAllocator allocator;
  return allocator;
}

}  // namespace specpipe::cuda
