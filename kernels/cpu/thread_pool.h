#pragma once
/// The CPU kernels' threads: one process-wide pool whose caller takes part as thread 0.
///
/// Kernels split only independent outputs across threads, so results never depend on
/// the thread count. A region costs about a microsecond: workers spin briefly on an
/// epoch counter before sleeping on it (C++20 atomic wait). Regions from different
/// caller threads (one per actor) run one after another, never interleaved, so two
/// actors sharing two cores do not oversubscribe them; a region started from inside a
/// region runs inline on the calling thread.
#include <cstdint>
#include <utility>

namespace specpipe::cpu {

/// Sets the threads used by the CPU kernels (0 = the default: $SPECPIPE_THREADS, else
/// all cores). Process-wide; takes effect for regions started afterwards.
void set_num_threads(int threads);
int num_threads();

namespace detail {
using RegionFn = void (*)(void* context, int thread, int threads);
void run_region(RegionFn fn, void* context);
}  // namespace detail

/// Calls fn(thread, threads) once on every pool thread and returns when all are done.
template <typename Fn>
void parallel_region(Fn&& fn) {
  auto trampoline = [](void* ctx, int thread, int threads) { (*static_cast<Fn*>(ctx))(thread, threads); };
  detail::run_region(trampoline, &fn);
}

/// Splits [0, count) into one contiguous range per thread: fn(begin, end).
template <typename Fn>
void parallel_for(int64_t count, Fn&& fn) {
  if (count <= 0) return;
  if (count == 1) return fn(int64_t{0}, int64_t{1});
  parallel_region([&](int thread, int threads) {
    const int64_t begin = count * thread / threads, end = count * (thread + 1) / threads;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace specpipe::cpu
