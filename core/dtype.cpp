#include "core/dtype.h"

#include <immintrin.h>

namespace specpipe {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::i64: return "I64";
  }
  return "?";
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  if (name == "F32") return DType::f32;
  if (name == "F16") return DType::f16;
  if (name == "BF16") return DType::bf16;
  if (name == "I32") return DType::i32;
  if (name == "I64") return DType::i64;
  return std::nullopt;
}

// F16C is part of x86-64-v3, the project's baseline (CMakeLists.txt).
float f16_to_f32(uint16_t bits) { return _cvtsh_ss(bits); }
uint16_t f32_to_f16(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

}  // namespace specpipe
