// libFuzzer harness: config.json of arbitrary bytes. ModelConfig::from_dir must return a
// config within the size limits or throw specpipe::Error; anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "fuzz/fuzz_file.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  specpipe::fuzz::write_input("config.json", data, size);
  try {
    const auto c = specpipe::ModelConfig::from_dir(specpipe::fuzz::scratch_dir());
    // What from_dir promises of any config it returns.
    if (c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0 || c.hidden_size <= 0 ||
        c.max_position_embeddings <= 0 || c.vocab_size <= 0)
      std::abort();
  } catch (const specpipe::Error&) {
  }
  return 0;
}
