#include "server/admission.h"

#include <fmt/format.h>

namespace specpipe::server {

std::optional<std::string> prepare_prompt(const actors::Engine& engine, const std::optional<std::string>& prompt_text,
                                          actors::RequestSpec& spec) {
  if (prompt_text) {
    try {
      spec.prompt = engine.tokenizer().encode(*prompt_text);
    } catch (const std::exception& e) {
      return fmt::format("prompt: {}", e.what());
    }
    if (spec.prompt.empty()) return std::string("prompt: encodes to no tokens");
  }
  const int32_t vocab = engine.parts().target->config().vocab_size;
  for (int32_t t : spec.prompt)
    if (t >= vocab) return fmt::format("prompt_ids: {} is not below the vocabulary size {}", t, vocab);
  return std::nullopt;
}

}  // namespace specpipe::server
