#pragma once
/// The host tier's memory on a CUDA backend (kvstore/host_tier.h): page-locked host
/// memory from cudaHostAlloc, which the layer ring's copy stream needs to copy
/// asynchronously (from pageable memory cudaMemcpyAsync stages through a bounce buffer
/// and the host waits). Allocation never throws: a failure is remembered for failure(),
/// so the tier's Error(out_of_capacity) says "... bytes of host memory that cannot be
/// pinned (cudaHostAlloc: ...)" and nothing stays allocated.
#include <cstddef>
#include <mutex>
#include <string>

#include "kvstore/host_tier.h"

namespace specpipe::cuda {

class PinnedHostAllocator final : public HostMemoryAllocator {
 public:
  void* allocate(size_t bytes) override;
  void release(void* memory, size_t bytes) override;
  std::string failure(size_t bytes) const override;

 private:
  mutable std::mutex mutex_;
  std::string last_error_;  // CUDA's message of the last failed cudaHostAlloc
};

/// The process's pinned allocator (stateless but for the last error, so a host tier may
/// outlive the model that handed it out).
PinnedHostAllocator& pinned_host_allocator();

}  // namespace specpipe::cuda
