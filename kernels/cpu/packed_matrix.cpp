#include "kernels/cpu/packed_matrix.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"

namespace specpipe::cpu {
namespace {

// Offset, in elements, of (row, col) inside the packed buffer.
int64_t packed_index(DType dtype, int64_t k, int64_t row, int64_t col) {
  const int64_t panel = row / kPanelOutputs, o = row % kPanelOutputs;
  const int64_t base = panel * k * kPanelOutputs;
  if (dtype == DType::bf16) return base + (col / 2) * kPanelOutputs * 2 + o * 2 + col % 2;
  return base + col * kPanelOutputs + o;
}

}  // namespace

PackedMatrix::PackedMatrix(DType dtype, const void* data, int64_t n, int64_t k)
    : dtype_(dtype), n_(n), k_(k) {
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16)
    fail(ErrorCode::unsupported, "packed matrix: dtype {} not supported", dtype_name(dtype));
  if (n <= 0 || k <= 0 || k % 2 != 0)
    fail(ErrorCode::unsupported, "packed matrix: shape [{}, {}] not supported (k must be even)", n, k);
  const size_t size = bytes();
  // Huge pages: a decode step streams every matrix from memory, and on 4 KiB pages each
  // panel stream took a TLB miss every 4 KiB (the 0.6B shape's GEMMs ran ~12-15% faster
  // on 2 MiB pages, 2 threads of the CI VM).
  auto* raw = static_cast<std::byte*>(allocate_huge_page_backed(size));
  if (!raw) fail(ErrorCode::out_of_capacity, "packed matrix: cannot allocate {} bytes", size);
  data_ = {raw, [](std::byte* p) { std::free(p); }};
  std::memset(raw, 0, size);
  const size_t es = dtype_size(dtype);
  const auto* src = static_cast<const std::byte*>(data);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c)
      std::memcpy(raw + packed_index(dtype, k, r, c) * static_cast<int64_t>(es), src + (r * k + c) * static_cast<int64_t>(es), es);
}

float PackedMatrix::at(int64_t row, int64_t col) const {
  const std::byte* p = data_.get() + packed_index(dtype_, k_, row, col) * static_cast<int64_t>(dtype_size(dtype_));
  if (dtype_ == DType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return dtype_ == DType::bf16 ? bf16_to_f32(bits) : f16_to_f32(bits);
}

}  // namespace specpipe::cpu
