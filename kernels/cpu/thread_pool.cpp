#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace specpipe::cpu {
namespace {

thread_local bool t_in_region = false;

class ThreadPool {
 public:
  explicit ThreadPool(int threads) { start(threads); }
  ~ThreadPool() { stop(); }

  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  void resize(int threads) {
    std::lock_guard lock(region_mutex_);
    stop();
    start(threads);
  }

  void run(detail::RegionFn fn, void* ctx) {
    if (t_in_region || workers_.empty()) {  // nested, or single-threaded
      fn(ctx, 0, 1);
      return;
    }
    std::lock_guard lock(region_mutex_);  // regions of different callers never interleave
    const int n = threads();
    fn_ = fn;
    ctx_ = ctx;
    pending_.store(n - 1, std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    // Kernels validate before their region and never throw inside one; the guard only
    // keeps the pool consistent if that contract is ever broken on this thread.
    struct Join {
      ThreadPool& pool;
      ~Join() {
        t_in_region = false;
        while (pool.pending_.load(std::memory_order_acquire) != 0) _mm_pause();
      }
    } join{*this};
    t_in_region = true;
    fn(ctx, 0, n);
  }

 private:
  void start(int threads) {
    stopping_ = false;
    // Workers start from the current epoch, read here: a worker that read it itself
    // could start after the first region was published and miss it.
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t, epoch] { work(t, epoch); });
  }

  void stop() {
    stopping_ = true;
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  void work(int thread, uint64_t seen) {
    t_in_region = true;
    for (;;) {
      // Spin a little (the next kernel of a forward follows within microseconds), then
      // sleep until the epoch moves.
      uint64_t now = seen;
      for (int spin = 0; spin < 20000 && (now = epoch_.load(std::memory_order_acquire)) == seen; ++spin)
        _mm_pause();
      if (now == seen) {
        epoch_.wait(seen, std::memory_order_acquire);
        now = epoch_.load(std::memory_order_acquire);
      }
      seen = now;
      if (stopping_) return;
      fn_(ctx_, thread, threads());
      pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex region_mutex_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stopping_{false};
  detail::RegionFn fn_ = nullptr;
  void* ctx_ = nullptr;
};

/// $SPECPIPE_THREADS if set (test runners use it to avoid oversubscribing cores shared
/// by parallel test processes), else every core.
int default_threads() {
  if (const char* env = std::getenv("SPECPIPE_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

ThreadPool& pool() {
  static ThreadPool instance(default_threads());
  return instance;
}

}  // namespace

void set_num_threads(int threads) {
  const int n = threads > 0 ? threads : default_threads();
  ThreadPool& p = pool();
  if (p.threads() != n) p.resize(n);
}

int num_threads() { return pool().threads(); }

namespace detail {
void run_region(RegionFn fn, void* context) { pool().run(fn, context); }
}  // namespace detail

}  // namespace specpipe::cpu
