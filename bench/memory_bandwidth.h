#pragma once
/// Measured memory read bandwidth of this machine: the floor of a memory-bound decode
/// step is (weight bytes read per token) / (this bandwidth).
#include <cstddef>

namespace specpipe::bench {

struct ReadBandwidth {
  double wall_Bps;  ///< bytes / wall time
  /// bytes / (process CPU time / threads): what the pass would reach with its threads
  /// running undisturbed, on a machine shared with other processes (core/timer.h).
  double cpu_Bps;
};

/// Medians over `repeats` passes of a vectorised sum over `bytes` of memory, with the
/// kernels' thread count. The array is far larger than the caches.
ReadBandwidth measure_read_bandwidth(size_t bytes = size_t{1} << 30, int repeats = 7);

}  // namespace specpipe::bench
