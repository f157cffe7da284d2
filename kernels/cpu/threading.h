#pragma once
/// Thread count of the CPU kernels. They split work only across independent outputs
/// (columns, rows, heads), so results never depend on the thread count.
namespace specpipe::cpu {

/// Sets the threads used by the CPU kernels (0 = all cores). Process-wide.
void set_num_threads(int threads);
int num_threads();

}  // namespace specpipe::cpu
