#pragma once
/// Element types of weights and activations, and the scalar conversions between them.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace specpipe {

enum class DType : uint8_t { f32, f16, bf16, i32, i64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t);
/// Parses the safetensors spelling ("F32", "F16", "BF16", "I32", "I64").
std::optional<DType> dtype_from_safetensors(std::string_view name);

/// bfloat16 -> float32 is exact: the bf16 bits are the high half of the float.
inline float bf16_to_f32(uint16_t bits) {
  uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// float32 -> bfloat16 with round-to-nearest-even (NaN stays NaN).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// IEEE half -> float32, exact (handles subnormals, inf and NaN).
float f16_to_f32(uint16_t bits);
/// float32 -> IEEE half, round-to-nearest-even.
uint16_t f32_to_f16(float f);

}  // namespace specpipe
