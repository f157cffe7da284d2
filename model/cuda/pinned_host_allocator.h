#pragma once
/// The host tier's memory on a CUDA backend (kvstore/host_tier.h): page-locked host
/// memory from cudaHostAlloc, which the layer ring's copy stream needs to copy
/// asynchronously (from pageable memory cudaMemcpyAsync stages through a bounce buffer
/// and the host waits). Where one cudaHostAlloc of a large tier fails (tens of GiB), the
/// pages come from mmap and are registered with cudaHostRegister, whole or in 4 GiB
/// pieces. Allocation never throws: a failure is remembered for failure(), so the tier's
/// Error(out_of_capacity) says "... bytes of host memory that cannot be pinned
/// (cudaHostAlloc: ...; cudaHostRegister ...)" and nothing stays allocated.
#include <cstddef>
#include <map>
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
  struct Registration {
    size_t bytes = 0;  // mapped
    size_t piece = 0;  // registered in pieces of this size (1: as one range)
  };
  mutable std::mutex mutex_;
  std::string last_error_;                     // why the last allocation failed
  std::map<void*, Registration> registered_;   // the mmap + cudaHostRegister allocations
};

/// The process's pinned allocator (stateless but for the last error, so a host tier may
/// outlive the model that handed it out).
PinnedHostAllocator& pinned_host_allocator();

}  // namespace specpipe::cuda
