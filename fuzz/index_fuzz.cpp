// libFuzzer harness: model.safetensors.index.json of arbitrary bytes, beside one valid
// shard `a.safetensors` (tensors "x", "y") that a weight_map may name. Opening must give
// an archive whose tensors all come from a shard, or throw specpipe::Error.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_file.h"
#include "model/safetensors.h"

namespace {
void write_shard() {
  std::string header =
      R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("y":{"dtype":"F16","shape":[1,2],"data_offsets":[8,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  const uint64_t len = header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<char>(len >> (8 * i));
  file += header;
  file.append(12, '\0');
  specpipe::fuzz::write_input("a.safetensors", reinterpret_cast<const uint8_t*>(file.data()),
                              file.size());
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool shard_written = (write_shard(), true);
  (void)shard_written;
  specpipe::fuzz::write_input("model.safetensors.index.json", data, size);
  try {
    specpipe::fuzz::touch_every_tensor(
        *specpipe::SafetensorsArchive::open(specpipe::fuzz::scratch_dir()));
  } catch (const specpipe::Error&) {
  }
  return 0;
}
