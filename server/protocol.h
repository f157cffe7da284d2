#pragma once
/// The JSON wire protocol, version 1 (docs/PROTOCOL.md): reading requests and writing
/// replies. No sockets here: the endpoint moves the bytes.
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "actors/engine.h"
#include "pipeline/pipeline_config.h"

namespace specpipe::server {

constexpr int kProtocolVersion = 1;

enum class RequestType { generate, cancel, stats, health };

/// A request that passed every check.
struct Request {
  std::string id;
  RequestType type = RequestType::health;
  // generate
  actors::RequestSpec spec;            ///< prompt ids filled unless prompt_text is set
  std::optional<std::string> prompt_text;
  bool stream = false;
  // cancel
  std::string target;
};

/// A request that did not: the reply is an error with this code; `id` if it was read.
struct Rejection {
  std::optional<std::string> id;
  std::string code;
  std::string message;
};

/// Reads one message. Never throws: any problem becomes a Rejection.
std::variant<Request, Rejection> parse_request(std::string_view bytes, const RequestDefaults& defaults,
                                               size_t max_bytes);

std::string error_reply(const std::optional<std::string>& id, std::string_view code, std::string_view message);
std::string delta_reply(const std::string& id, const actors::TokenDelta& delta);
std::string final_reply(const std::string& id, const actors::Completion& completion);
std::string cancelled_reply(const std::string& id, const std::string& target);
nlohmann::json stats_json(const SpecStats& stats);
nlohmann::json kv_json(const KvOccupancy& kv);

}  // namespace specpipe::server
