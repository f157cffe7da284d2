#include "kernels/cpu/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace specpipe::cpu {
namespace {

thread_local bool t_in_region = false;

/// One step of a spin-wait: mostly a pause, every 64 steps a yield, so a spinning thread
/// never holds a core that the thread it waits for is queued on.
inline void relax(unsigned spin) {
  if (spin % 64 == 63) sched_yield();
  else _mm_pause();
}

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

  void run(int64_t count, int64_t grain, bool guided, detail::ChunkFn fn, void* ctx) {
    if (t_in_region || workers_.empty()) return fn(ctx, 0, count);
    std::lock_guard lock(region_mutex_);  // regions of different callers never interleave
    fn_ = fn;
    ctx_ = ctx;
    count_ = count;
    grain_ = grain;
    guided_ = guided;
    next_.store(0, std::memory_order_relaxed);
    open_.store(true, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    t_in_region = true;
    claim_chunks();
    t_in_region = false;
    // Close the region, then wait only for workers that joined it; a worker that arrives
    // later sees it closed and leaves without touching fn_.
    open_.store(false, std::memory_order_release);
    for (unsigned spin = 0; joined_.load(std::memory_order_acquire) != 0; ++spin) relax(spin);
  }

 private:
  void claim_chunks() {
    if (!guided_) {
      for (int64_t begin; (begin = next_.fetch_add(grain_, std::memory_order_relaxed)) < count_;)
        fn_(ctx_, begin, std::min(begin + grain_, count_));
      return;
    }
    const int64_t parts = 2 * threads();
    for (int64_t begin = next_.load(std::memory_order_relaxed); begin < count_;) {
      const int64_t share = (count_ - begin + parts - 1) / parts;
      const int64_t size = std::max<int64_t>(1, (share + grain_ - 1) / grain_) * grain_;
      if (next_.compare_exchange_weak(begin, begin + size, std::memory_order_relaxed)) {
        fn_(ctx_, begin, std::min(begin + size, count_));
        begin = next_.load(std::memory_order_relaxed);
      }
    }
  }

  void start(int threads) {
    stopping_ = false;
    // Workers start from the current epoch, read here: a worker that read it itself
    // could start after the first region was published and miss it.
    const uint64_t epoch = epoch_.load(std::memory_order_acquire);
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this, epoch] { work(epoch); });
  }

  void stop() {
    stopping_ = true;
    epoch_.fetch_add(1, std::memory_order_release);
    epoch_.notify_all();
    for (std::thread& w : workers_) w.join();
    workers_.clear();
  }

  void work(uint64_t seen) {
    t_in_region = true;
    for (;;) {
      // Spin a little (a forward's next kernel follows within microseconds), then sleep
      // until the epoch moves.
      uint64_t now = seen;
      for (unsigned spin = 0; spin < 4096 && (now = epoch_.load(std::memory_order_acquire)) == seen; ++spin)
        relax(spin);
      if (now == seen) {
        epoch_.wait(seen, std::memory_order_acquire);
        now = epoch_.load(std::memory_order_acquire);
      }
      seen = now;
      if (stopping_) return;
      joined_.fetch_add(1, std::memory_order_acq_rel);
      if (open_.load(std::memory_order_acquire)) claim_chunks();
      joined_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::vector<std::thread> workers_;
  std::mutex region_mutex_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<bool> open_{false};
  std::atomic<int> joined_{0};
  std::atomic<int64_t> next_{0};
  std::atomic<bool> stopping_{false};
  detail::ChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t count_ = 0, grain_ = 1;
  bool guided_ = false;
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

int64_t default_grain(int64_t count) {
  const int64_t chunks = 4 * static_cast<int64_t>(pool().threads());
  return std::max<int64_t>(1, (count + chunks - 1) / chunks);
}

namespace detail {
void run_chunks(int64_t count, int64_t grain, bool guided, ChunkFn fn, void* context) {
  pool().run(count, grain, guided, fn, context);
}
}  // namespace detail

}  // namespace specpipe::cpu
