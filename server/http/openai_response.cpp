#include "server/http/openai_response.h"

#include <nlohmann/json.hpp>

#include "server/protocol.h"

namespace specpipe::server::http {
namespace {

using nlohmann::json;

json envelope(const ResponseHeader& h, bool chunk) {
  const char* object = h.kind == ApiKind::completion ? "text_completion" : chunk ? "chat.completion.chunk" : "chat.completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

json usage(const actors::Completion& c) {
  const int64_t completion_tokens = static_cast<int64_t>(c.tokens.size());
  return {{"prompt_tokens", c.stats.prompt_tokens}, {"completion_tokens", completion_tokens},
          {"total_tokens", c.stats.prompt_tokens + completion_tokens}};
}

json extension(const actors::Completion& c) {
  return {{"tokens", c.tokens}, {"finish_reason", to_string(c.reason)}, {"stats", stats_json(c.stats)}};
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

const char* openai_finish_reason(FinishReason reason) {
  switch (reason) {
    case FinishReason::eos:
    case FinishReason::stop: return "stop";
    case FinishReason::length:
    case FinishReason::context: return "length";
    case FinishReason::cancelled:
    case FinishReason::error: return "abort";
  }
  return "abort";
}

std::string completion_body(const ResponseHeader& h, const actors::Completion& c) {
  json j = envelope(h, false);
  json choice = {{"index", 0}, {"finish_reason", openai_finish_reason(c.reason)}, {"logprobs", nullptr}};
  if (h.kind == ApiKind::completion)
    choice["text"] = c.text;
  else
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  j["choices"] = json::array({choice});
  j["usage"] = usage(c);
  j["specpipe"] = extension(c);
  return dump(j);
}

std::string delta_chunk(const ResponseHeader& h, const actors::TokenDelta& d, bool first) {
  json j = envelope(h, true);
  json choice = {{"index", 0}, {"finish_reason", nullptr}, {"logprobs", nullptr}};
  if (h.kind == ApiKind::completion) {
    choice["text"] = d.text;
  } else {
    choice["delta"] = {{"content", d.text}};
    if (first) choice["delta"]["role"] = "assistant";
  }
  j["choices"] = json::array({choice});
  j["specpipe"] = {{"tokens", d.tokens}};
  return dump(j);
}

std::string final_chunk(const ResponseHeader& h, const actors::Completion& c) {
  json j = envelope(h, true);
  json choice = {{"index", 0}, {"finish_reason", openai_finish_reason(c.reason)}, {"logprobs", nullptr}};
  if (h.kind == ApiKind::completion)
    choice["text"] = "";
  else
    choice["delta"] = json::object();
  j["choices"] = json::array({choice});
  json ext = extension(c);
  ext.erase("tokens");  // the deltas carried them
  j["specpipe"] = ext;
  return dump(j);
}

std::string usage_chunk(const ResponseHeader& h, const actors::Completion& c) {
  json j = envelope(h, true);
  j["choices"] = json::array();
  j["usage"] = usage(c);
  return dump(j);
}

std::string sse_event(const std::string& json_text) { return "data: " + json_text + "\n\n"; }

}  // namespace specpipe::server::http
