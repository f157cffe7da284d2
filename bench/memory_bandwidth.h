#pragma once
/// Measured memory read bandwidth of this machine: the floor of a memory-bound decode
/// step is (weight bytes read per token) / (this bandwidth).
#include <cstddef>

namespace specpipe::bench {

/// Median over `repeats` passes of a vectorised sum over `bytes` of memory, with the
/// kernels' thread count; bytes per second. The array is far larger than the caches.
double measure_read_bandwidth(size_t bytes = size_t{1} << 30, int repeats = 7);

}  // namespace specpipe::bench
