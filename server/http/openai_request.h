#pragma once
/// Reading the bodies of POST /v1/completions and /v1/chat/completions (docs/HTTP.md)
/// into the engine's request. No sockets here: the session moves the bytes.
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "actors/engine.h"
#include "pipeline/pipeline_config.h"
#include "server/http/chat_template.h"

namespace specpipe::server::http {

enum class ApiKind { completion, chat };

/// A request that passed every check.
struct ApiRequest {
  ApiKind kind = ApiKind::completion;
  actors::RequestSpec spec;               ///< prompt ids filled unless prompt_text is set
  std::optional<std::string> prompt_text;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage: a last chunk with usage
};

/// A request refused: the HTTP status, an error code of docs/PROTOCOL.md's table (plus
/// model_not_found), the offending field (may be empty) and a message for people.
struct ApiError {
  int status = 400;
  std::string code;
  std::string message;
  std::string param;
};

/// What parsing needs besides the body.
struct ApiContext {
  const RequestDefaults& defaults;
  const ChatTemplate& chat_template;
  const std::string& model_name;  ///< the only `model` accepted (besides the target's path)
  const std::string& model_path;
};

/// Reads one body. Never throws: any problem becomes an ApiError (400, or 404 for an
/// unknown model).
std::variant<ApiRequest, ApiError> parse_api_request(ApiKind kind, std::string_view body, const ApiContext& context);

/// {"error": {"message", "type", "param", "code"}}, the shape OpenAI clients read.
std::string error_body(const ApiError& error);

}  // namespace specpipe::server::http
