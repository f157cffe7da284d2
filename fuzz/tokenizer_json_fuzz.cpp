// libFuzzer harness: tokenizer.json of arbitrary bytes. Loading gives a tokenizer or
// throws specpipe::Error; a tokenizer that loads encodes a fixed set of texts (ASCII,
// accents, CJK, emoji, its own added tokens written in the text) into ids it has, and
// decodes every id it has, as tokenizer_check.h requires. Anything else is a bug.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_file.h"
#include "fuzz/tokenizer_check.h"
#include "model/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = specpipe::fuzz::write_input("tokenizer.json", data, size);
  std::optional<specpipe::Tokenizer> tok;
  try {
    tok = specpipe::Tokenizer::from_file(path);
  } catch (const specpipe::Error&) {
    return 0;
  }
  for (const char* text : {"", "Hello, world!  def f(x):\n\treturn x * 2\r\n", "caf\xc3\xa9 e\xcc\x81 \xef\xbc\xa1",
                           "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80!", "<|endoftext|><s> </s>ab ab", "\xff\xfe"})
    specpipe::fuzz::check_round_trip(*tok, text, false);
  // Every id it has decodes (vocab_size may exceed the ids in use: holes are refused).
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok->vocab_size() && id < 4096; ++id) {
    try {
      (void)tok->token_bytes(id);
      ids.push_back(id);
    } catch (const specpipe::Error&) {
    }
  }
  specpipe::fuzz::check_decode(*tok, ids);
  return 0;
}
