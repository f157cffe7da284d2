#pragma once
/// The CPU kernels' threads: one process-wide pool that shares work with its caller.
///
/// parallel_for hands out chunks of an index range from an atomic counter: the calling
/// thread claims chunks itself, and so does every pool worker that is free. Nothing
/// waits for a worker that cannot run (another process, an actor thread the kernel
/// placed on the same core): the caller then simply does the whole range. Kernels split
/// only independent outputs, so results never depend on who computed which chunk.
///
/// Regions from different caller threads (one per actor) run one after another; a
/// region started inside a region runs inline on the calling thread.
#include <cstdint>
#include <type_traits>

namespace specpipe::cpu {

/// Sets the threads used by the CPU kernels (0 = the default: $SPECPIPE_THREADS, else
/// all cores). Process-wide; takes effect for regions started afterwards.
void set_num_threads(int threads);
int num_threads();

namespace detail {
using ChunkFn = void (*)(void* context, int64_t begin, int64_t end);
void run_chunks(int64_t count, int64_t grain, bool guided, ChunkFn fn, void* context);

template <typename Fn>
void run(int64_t count, int64_t grain, bool guided, Fn&& fn) {
  if (count <= 0) return;
  if (grain <= 0) grain = 1;
  if (count <= grain) return fn(int64_t{0}, count);
  using F = std::remove_reference_t<Fn>;
  auto trampoline = [](void* ctx, int64_t begin, int64_t end) { (*static_cast<F*>(ctx))(begin, end); };
  run_chunks(count, grain, guided, trampoline, const_cast<void*>(static_cast<const void*>(&fn)));
}
}  // namespace detail

/// Calls fn(begin, end) on chunks of at most `grain` indices covering [0, count), in
/// parallel, and returns when all are done. fn must not throw.
template <typename Fn>
void parallel_for(int64_t count, int64_t grain, Fn&& fn) {
  detail::run(count, grain, false, fn);
}

/// parallel_for with chunks that shrink as the range runs out (guided scheduling): each
/// claim takes what is left / (2 x threads), rounded up to a multiple of `grain` (at
/// least `grain`), so chunks start long and the threads finish within about one
/// `grain` of each other. Chunks begin at multiples of `grain`. For ranges of even cost
/// (the GEMMs' panels), where a region's end otherwise waits on half a long chunk.
template <typename Fn>
void parallel_for_guided(int64_t count, int64_t grain, Fn&& fn) {
  detail::run(count, grain, true, fn);
}

/// A grain giving each thread several chunks of [0, count) (for load balance).
int64_t default_grain(int64_t count);

}  // namespace specpipe::cpu
