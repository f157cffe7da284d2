#pragma once
/// Copies that run in order beside the compute side, and the events that order the two
/// (ARCHITECTURE.md sections 4-5). The layer ring (kvstore/layer_ring.h) is written
/// against this interface only: the CPU backend runs the copies on one copy thread
/// (ThreadCopyStream, below); a CUDA backend runs them as cudaMemcpyAsync on a copy
/// stream, with cudaEvents for the tickets and cudaStreamWaitEvent for wait().
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace specpipe {

class CopyStream {
 public:
  /// An event: complete once every job enqueued up to and including the one that
  /// returned it has run. Tickets of one stream increase from 1.
  using Ticket = uint64_t;

  virtual ~CopyStream() = default;
  /// Queues `job` behind every job queued before, ordered after the compute work issued
  /// before this call (CPU: that work is done already, since the compute side runs on
  /// the calling thread; CUDA: the copy stream first waits on an event recorded on the
  /// compute stream). Returns the event recorded after it. A job that throws does not
  /// stop the jobs after it; the error is rethrown by the next wait() or synchronize().
  virtual Ticket enqueue(std::function<void()> job) = 0;
  /// Orders the compute side after `ticket` (CPU: blocks the calling thread; CUDA: the
  /// compute stream waits on the event, the host does not). Returns true when the work
  /// was not complete yet at the call (a stall of the compute side).
  virtual bool wait(Ticket ticket) = 0;
  /// Blocks until every queued job has run; rethrows the first error of a job since the
  /// last wait or synchronize.
  virtual void synchronize() = 0;
};

/// Copies without overlap: each job runs in enqueue(), on the calling thread, so the
/// compute side never waits in wait() but pays for every copy itself (the synchronous
/// offload of the nano-vLLM design; `offload.overlap: false`, for comparison).
class InlineCopyStream final : public CopyStream {
 public:
  Ticket enqueue(std::function<void()> job) override;
  bool wait(Ticket ticket) override;
  void synchronize() override;

 private:
  Ticket queued_ = 0;
  std::exception_ptr error_;
};

/// The CPU backend's copy stream: one thread that runs the jobs in order.
class ThreadCopyStream final : public CopyStream {
 public:
  ThreadCopyStream();
  ~ThreadCopyStream() override;  ///< runs what is queued, then stops the thread
  ThreadCopyStream(const ThreadCopyStream&) = delete;
  ThreadCopyStream& operator=(const ThreadCopyStream&) = delete;

  Ticket enqueue(std::function<void()> job) override;
  bool wait(Ticket ticket) override;
  void synchronize() override;

 private:
  void run();
  void rethrow_locked(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable work_, done_;
  std::deque<std::function<void()>> jobs_;
  Ticket queued_ = 0;     // tickets handed out
  Ticket completed_ = 0;  // jobs run
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the state above exists
};

}  // namespace specpipe
