#pragma once
/// What every endpoint checks before it hands a request to the engine, so the ZeroMQ
/// endpoint and the HTTP gateway take one request path into Engine::submit.
#include <optional>
#include <string>

#include "actors/engine.h"

namespace specpipe::server {

/// Encodes `prompt_text` (when given) into spec.prompt with the target's tokenizer, then
/// checks every prompt id against the target's vocabulary. Returns why the request must be
/// refused (a bad_request message), or nullopt when it may be submitted. Never throws.
std::optional<std::string> prepare_prompt(const actors::Engine& engine, const std::optional<std::string>& prompt_text,
                                          actors::RequestSpec& spec);

}  // namespace specpipe::server
