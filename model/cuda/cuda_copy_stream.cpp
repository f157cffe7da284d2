#include "model/cuda/cuda_copy_stream.h"

#include <utility>

#include "model/cuda/device_memory.h"

namespace specpipe::cuda {
namespace {

// More than any ring's slots: a wait is never on a ticket this many jobs old.
constexpr size_t kTicketEvents = 64;

}  // namespace

CudaCopyStream::CudaCopyStream(cudaStream_t compute, bool overlap) : compute_(compute), overlap_(overlap) {
  if (!overlap_) return;
  try {
    cuda_try(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "copy stream");
    cuda_try(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), "copy stream event");
    events_.resize(kTicketEvents, nullptr);
    for (cudaEvent_t& e : events_) cuda_try(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "copy stream event");
  } catch (...) {
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (compute_done_) cudaEventDestroy(compute_done_);
    if (copy_) cudaStreamDestroy(copy_);
    throw;
  }
}

CudaCopyStream::~CudaCopyStream() {
  if (!overlap_) return;
  cudaStreamSynchronize(copy_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaEventDestroy(compute_done_);
  cudaStreamDestroy(copy_);
}

CopyStream::Ticket CudaCopyStream::enqueue(std::function<void()> job) {
  const Ticket ticket = ++queued_;
  try {
    if (overlap_) {
      // After the compute work issued so far (a ring slot's last reader among it).
      cuda_try(cudaEventRecord(compute_done_, compute_), "copy stream: record compute");
      cuda_try(cudaStreamWaitEvent(copy_, compute_done_, 0), "copy stream: wait for compute");
    }
    job();
    if (overlap_) cuda_try(cudaEventRecord(event(ticket), copy_), "copy stream: record ticket");
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
  return ticket;
}

bool CudaCopyStream::wait(Ticket ticket) {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  if (!overlap_ || ticket == 0) return false;  // in line: stream order is the wait
  const cudaEvent_t e = event(ticket);
  const cudaError_t state = cudaEventQuery(e);
  if (state == cudaErrorNotReady) cudaGetLastError();  // not an error: keep it from the next launch's check
  else cuda_try(state, "copy stream: query");
  cuda_try(cudaStreamWaitEvent(compute_, e, 0), "copy stream: compute waits");
  return state == cudaErrorNotReady;
}

void CudaCopyStream::synchronize() {
  if (overlap_) cuda_try(cudaStreamSynchronize(copy_), "copy stream: synchronize");
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace specpipe::cuda
