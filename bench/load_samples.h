#pragma once
// What a load-generator client records (bench/load_generator.cpp): time to first token,
// inter-token latency, tokens, finished requests and errors.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace specpipe::bench {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

struct Samples {
  std::mutex mutex;
  std::vector<double> ttft_ms, itl_ms;
  int64_t tokens = 0, requests = 0, errors = 0;

  /// Merges one client's samples (thread-safe).
  void add(const std::vector<double>& ttft, const std::vector<double>& itl, int64_t n_tokens, int64_t done,
           int64_t failed) {
    std::lock_guard lock(mutex);
    ttft_ms.insert(ttft_ms.end(), ttft.begin(), ttft.end());
    itl_ms.insert(itl_ms.end(), itl.begin(), itl.end());
    tokens += n_tokens;
    requests += done;
    errors += failed;
  }
};

/// Records a delta of `n` tokens arriving at `now`: the first gives TTFT, later ones ITL
/// (the gap shared by the tokens it carries).
struct StreamClock {
  Clock::time_point sent, last;
  bool first = true;
  void delta(size_t n, Clock::time_point now, std::vector<double>& ttft, std::vector<double>& itl) {
    if (first) ttft.push_back(ms_since(sent, now));
    else
      for (size_t i = 0; i < n; ++i) itl.push_back(ms_since(last, now) / static_cast<double>(n));
    first = false;
    last = now;
  }
};

}  // namespace specpipe::bench
