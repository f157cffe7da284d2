#pragma once
/// A copy stream for tests that runs nothing until the compute side waits, so which job
/// was queued when, and what ran before what, is visible (host_tier_test, write_back_test).
#include <functional>
#include <utility>
#include <vector>

#include "kvstore/copy_stream.h"

namespace specpipe::kvtest {

class ManualStream final : public CopyStream {
 public:
  std::vector<std::function<void()>> jobs;
  size_t ran = 0;
  Ticket enqueue(std::function<void()> job) override {
    jobs.push_back(std::move(job));
    return jobs.size();
  }
  bool wait(Ticket ticket) override {
    const bool stalled = ran < ticket;
    while (ran < ticket) jobs[ran++]();
    return stalled;
  }
  void synchronize() override { wait(jobs.size()); }
};

}  // namespace specpipe::kvtest
