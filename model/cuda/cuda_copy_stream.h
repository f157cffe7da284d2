#pragma once
/// The CUDA copy stream of the layer ring (kvstore/copy_stream.h's contract on a device):
/// jobs enqueue cudaMemcpyAsync calls on a stream of their own, ordered after the compute
/// work issued before enqueue() by an event recorded on the compute stream; each job's
/// ticket is an event recorded on the copy stream after it, and wait(ticket) makes the
/// compute stream wait on that event (cudaStreamWaitEvent): the host never blocks in
/// the ring's loop. A job runs on the calling thread and only ENQUEUES its copies, on
/// stream() (it must use that stream and no other).
///
/// With overlap off (`offload.overlap: false`, the seed's synchronous way, for
/// comparison) stream() is the compute stream itself: the copies run between the
/// kernels, in line, and no event is needed.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <vector>

#include "kvstore/copy_stream.h"

namespace specpipe::cuda {

class CudaCopyStream final : public CopyStream {
 public:
  /// On the current device. Throws Error(internal) when a stream or event cannot be made.
  CudaCopyStream(cudaStream_t compute, bool overlap);
  ~CudaCopyStream() override;  ///< waits for the queued copies
  CudaCopyStream(const CudaCopyStream&) = delete;
  CudaCopyStream& operator=(const CudaCopyStream&) = delete;

  /// Where a job enqueues its copies.
  cudaStream_t stream() const { return overlap_ ? copy_ : compute_; }
  bool overlap() const { return overlap_; }

  Ticket enqueue(std::function<void()> job) override;
  /// The compute stream waits for `ticket`'s event. Returns whether the copies were not
  /// done at the call (cudaEventQuery; the host does not wait). Rethrows a job's error.
  bool wait(Ticket ticket) override;
  /// Blocks the host until every queued copy ran; rethrows a job's error.
  void synchronize() override;

 private:
  cudaEvent_t event(Ticket ticket) const { return events_[ticket % events_.size()]; }

  cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  bool overlap_;
  cudaEvent_t compute_done_ = nullptr;  // recorded on the compute stream at each enqueue
  // Tickets' events, reused round robin: a wait on a ticket older than the ring's depth
  // would wait for a newer job (later, never earlier), and the ring never waits that far back.
  std::vector<cudaEvent_t> events_;
  Ticket queued_ = 0;
  std::exception_ptr error_;
};

}  // namespace specpipe::cuda
