#pragma once
/// Weight matrices repacked for the CPU GEMM: panels of 8 output rows, k-major inside a
/// panel, so one vector load yields the weights of 8 outputs at one (or two) k.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace specpipe::cpu {

/// Outputs per panel: one AVX2 vector of float32.
constexpr int64_t kPanelOutputs = 8;

/// Layout, panel p holding output rows [8p, 8p + 8) (rows past n are zero):
///   F32  [k][8]         float
///   F16  [k][8]         half
///   BF16 [k/2][8][2]    bf16: the 32-bit lane o holds (w[o][2i], w[o][2i+1]), so a
///                       shift and a mask widen the pair without a shuffle
/// The element type is the source dtype: packing is exact and costs no precision.
class PackedMatrix {
 public:
  PackedMatrix() = default;
  /// Packs a row-major [n, k] matrix (a torch Linear weight [out, in]). k must be even.
  PackedMatrix(DType dtype, const void* data, int64_t n, int64_t k);

  DType dtype() const { return dtype_; }
  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return (n_ + kPanelOutputs - 1) / kPanelOutputs; }
  /// Start of panel p; panels are contiguous, `panel_bytes()` apart.
  const std::byte* panel(int64_t p) const { return data_.get() + p * panel_bytes(); }
  size_t panel_bytes() const { return static_cast<size_t>(k_ * kPanelOutputs) * dtype_size(dtype_); }
  size_t bytes() const { return static_cast<size_t>(panels()) * panel_bytes(); }
  /// Element (row, col) as float32, for tests and references.
  float at(int64_t row, int64_t col) const;

 private:
  DType dtype_ = DType::f32;
  int64_t n_ = 0, k_ = 0;
  std::unique_ptr<std::byte[], void (*)(std::byte*)> data_{nullptr, [](std::byte*) {}};
};

}  // namespace specpipe::cpu
