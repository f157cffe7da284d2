// libFuzzer harness: arbitrary bytes through the demo tokenizer (models/demo-target).
// As text: encode refuses exactly the invalid UTF-8; otherwise encode -> decode -> encode
// is stable and ASCII comes back unchanged. As ids (little-endian 16-bit, taken modulo
// the vocabulary): decode and the incremental decoder agree and give valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "fuzz/tokenizer_check.h"
#include "model/tokenizer/tokenizer.h"

#ifndef SPECPIPE_FUZZ_ROOT
#error "SPECPIPE_FUZZ_ROOT: the source tree, where models/demo-target lives (scripts/fuzz.sh sets it)"
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const specpipe::Tokenizer tok =
      specpipe::Tokenizer::from_file(SPECPIPE_FUZZ_ROOT "/models/demo-target/tokenizer.json");
  specpipe::fuzz::check_round_trip(tok, std::string_view(reinterpret_cast<const char*>(data), size), true);
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2)
    ids.push_back(static_cast<int32_t>((data[i] | data[i + 1] << 8) % tok.vocab_size()));
  specpipe::fuzz::check_decode(tok, ids);
  return 0;
}
