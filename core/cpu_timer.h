#pragma once
/// Process CPU time, for benchmarks on a shared machine.
#include <time.h>

namespace specpipe {

/// CPU time of the whole process (every thread). On a machine shared with other
/// processes wall time measures the share of the cores a process was given, while CPU
/// time divided by its threads approximates the wall time it would take alone (memory
/// stalls and spin-waits count as CPU time; time spent descheduled does not).
class CpuStopwatch {
 public:
  CpuStopwatch() : start_(now()) {}
  double elapsed_ms() const { return now() - start_; }

 private:
  static double now() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
  }
  double start_;
};

}  // namespace specpipe
