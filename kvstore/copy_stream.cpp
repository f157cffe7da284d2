#include "kvstore/copy_stream.h"

#include <utility>

namespace specpipe {

CopyStream::Ticket InlineCopyStream::enqueue(std::function<void()> job) {
  try {
    job();
  } catch (...) {
    if (!error_) error_ = std::current_exception();
  }
  return ++queued_;
}

bool InlineCopyStream::wait(Ticket /*ticket: every job has run*/) {
  synchronize();
  return false;
}

void InlineCopyStream::synchronize() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

ThreadCopyStream::ThreadCopyStream() : thread_([this] { run(); }) {}

ThreadCopyStream::~ThreadCopyStream() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
}

void ThreadCopyStream::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    work_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, nothing left
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    ++completed_;
    done_.notify_all();
  }
}

CopyStream::Ticket ThreadCopyStream::enqueue(std::function<void()> job) {
  Ticket ticket = 0;
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ticket = ++queued_;
  }
  work_.notify_one();
  return ticket;
}

void ThreadCopyStream::rethrow_locked(std::unique_lock<std::mutex>& lock) {
  if (!error_) return;
  std::exception_ptr error = std::exchange(error_, nullptr);
  lock.unlock();
  std::rethrow_exception(error);
}

bool ThreadCopyStream::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  const bool stalled = completed_ < ticket;
  done_.wait(lock, [&] { return completed_ >= ticket; });
  rethrow_locked(lock);
  return stalled;
}

void ThreadCopyStream::synchronize() {
  std::unique_lock lock(mutex_);
  done_.wait(lock, [&] { return completed_ >= queued_; });
  rethrow_locked(lock);
}

}  // namespace specpipe
