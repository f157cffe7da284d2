// libFuzzer harness: a safetensors file of arbitrary bytes. The parser must either open it
// (then every entry lies inside the mapped data) or throw specpipe::Error; any other
// exception, crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz/fuzz_file.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = specpipe::fuzz::write_input("model.safetensors", data, size);
  try {
    specpipe::fuzz::touch_every_tensor(*specpipe::SafetensorsArchive::open_file(path));
  } catch (const specpipe::Error&) {
  }
  return 0;
}
