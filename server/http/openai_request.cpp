#include "server/http/openai_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

namespace specpipe::server::http {
namespace {

using nlohmann::json;

/// Thrown inside the reader only; parse_api_request turns it into an ApiError.
struct Refusal {
  ApiError error;
};

[[noreturn]] void refuse(std::string param, std::string message) {
  throw Refusal{{400, "bad_request", std::move(message), std::move(param)}};
}

/// A field that is absent or null counts as not given, as OpenAI's API treats it.
const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& v, const char* key, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) refuse(key, fmt::format("{}: expected an integer", key));
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    refuse(key, fmt::format("{}: out of range [{}, {}]", key, lo, hi));
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) refuse(key, fmt::format("{}: {} is out of range [{}, {}]", key, x, lo, hi));
  return x;
}

double number(const json& v, const char* key, double lo, double hi, bool lo_open) {
  if (!v.is_number()) refuse(key, fmt::format("{}: expected a number", key));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
    refuse(key, fmt::format("{}: {} is out of range {}{}, {}]", key, x, lo_open ? "(" : "[", lo, hi));
  return x;
}

bool boolean(const json& v, const char* key) {
  if (!v.is_boolean()) refuse(key, fmt::format("{}: expected true or false", key));
  return v.get<bool>();
}

/// OpenAI fields this engine has no counterpart for: accepted only at their neutral value,
/// so a client never silently gets something other than it asked for.
void neutral_only(const json& body) {
  if (const json* v = field(body, "n"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    refuse("n", "n: only 1 completion per request is supported");
  if (const json* v = field(body, "best_of"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    refuse("best_of", "best_of: only 1 is supported");
  for (const char* key : {"presence_penalty", "frequency_penalty"})
    if (const json* v = field(body, key); v && !(v->is_number() && v->get<double>() == 0.0))
      refuse(key, fmt::format("{}: penalties are not supported (only 0)", key));
  if (const json* v = field(body, "logprobs"); v && !(v->is_boolean() ? !v->get<bool>() : v->is_number_integer() && v->get<int64_t>() == 0))
    refuse("logprobs", "logprobs: not supported");
  if (const json* v = field(body, "top_logprobs"); v && !(v->is_number_integer() && v->get<int64_t>() == 0))
    refuse("top_logprobs", "top_logprobs: not supported");
  if (const json* v = field(body, "echo"); v && !(v->is_boolean() && !v->get<bool>())) refuse("echo", "echo: not supported");
  if (const json* v = field(body, "suffix"); v && !(v->is_string() && v->get<std::string>().empty()))
    refuse("suffix", "suffix: not supported");
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    refuse("logit_bias", "logit_bias: not supported");
  if (const json* v = field(body, "user"); v && !v->is_string()) refuse("user", "user: expected a string");
}

void check_known(const json& body, const std::set<std::string>& known) {
  for (const auto& [key, value] : body.items())
    if (!known.count(key)) refuse(key, fmt::format("{}: unknown field", key));
}

void read_model(const json& body, const ApiContext& c) {
  const json* v = field(body, "model");
  if (!v) return;
  if (!v->is_string()) refuse("model", "model: expected a string");
  const std::string m = v->get<std::string>();
  if (m != c.model_name && m != c.model_path)
    throw Refusal{{404, "model_not_found", fmt::format("model '{}' is not served here (GET /v1/models: '{}')", m, c.model_name), "model"}};
}

/// `prompt`: a string, a list of token ids, or a list holding exactly one of those.
void read_prompt(const json& body, ApiRequest& r) {
  const json* v = field(body, "prompt");
  if (!v) refuse("prompt", "prompt: required");
  const json* p = v;
  if (v->is_array() && !v->empty() && (v->front().is_string() || v->front().is_array())) {
    if (v->size() != 1) refuse("prompt", "prompt: one prompt per request (a list of several is not supported)");
    p = &v->front();
  }
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
    if (r.prompt_text->empty()) refuse("prompt", "prompt: must not be empty");
    return;
  }
  if (!p->is_array() || p->empty()) refuse("prompt", "prompt: expected a string or a non-empty list of token ids");
  for (const json& t : *p) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      refuse("prompt", "prompt: every token id must be a non-negative integer");
    r.spec.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
}

/// `content`: a string, or a list of {"type": "text", "text": ...} parts.
std::string message_content(const json& m, size_t index) {
  const std::string where = fmt::format("messages[{}].content", index);
  const json* c = field(m, "content");
  if (!c) return {};
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) refuse(where, fmt::format("{}: expected a string or a list of text parts", where));
  std::string text;
  for (const json& part : *c) {
    if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
      refuse(where, fmt::format("{}: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported", where));
    text += part["text"].get<std::string>();
  }
  return text;
}

void read_messages(const json& body, const ApiContext& c, ApiRequest& r) {
  const json* v = field(body, "messages");
  if (!v || !v->is_array() || v->empty()) refuse("messages", "messages: expected a non-empty list of messages");
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    if (!m.is_object()) refuse("messages", fmt::format("messages[{}]: expected an object", i));
    const json* role = field(m, "role");
    static const std::set<std::string> roles = {"system", "developer", "user", "assistant"};
    if (!role || !role->is_string() || !roles.count(role->get<std::string>()))
      refuse("messages", fmt::format("messages[{}].role: expected system, developer, user or assistant", i));
    for (const auto& [key, value] : m.items())
      if (key != "role" && key != "content" && key != "name")
        refuse("messages", fmt::format("messages[{}].{}: not supported", i, key));
    std::string name = role->get<std::string>() == "developer" ? "system" : role->get<std::string>();
    messages.push_back({std::move(name), message_content(m, i)});
  }
  // Checked after the body itself so that a malformed request hears about its own fault.
  if (!c.chat_template.available()) refuse("messages", c.chat_template.unavailable_reason());
  r.prompt_text = c.chat_template.render(messages);
}

void read_stop(const json& body, ApiRequest& r) {
  const json* v = field(body, "stop");
  if (!v) return;
  auto add = [&](const json& s) {
    if (!s.is_string() || s.get<std::string>().empty()) refuse("stop", "stop: expected a non-empty string or a list of them");
    r.spec.stop.push_back(s.get<std::string>());
  };
  if (v->is_array())
    for (const json& s : *v) add(s);
  else
    add(*v);
}

ApiRequest read(ApiKind kind, std::string_view bytes, const ApiContext& c) {
  json body;
  try {
    body = json::parse(bytes);
  } catch (const json::exception& e) {
    throw Refusal{{400, "malformed_json", fmt::format("the body is not valid JSON: {}", e.what()), ""}};
  }
  if (!body.is_object()) throw Refusal{{400, "malformed_json", "the body must be a JSON object", ""}};
  std::set<std::string> known = {"model", "stream", "stream_options", "max_tokens", "temperature", "top_p", "top_k",
                                 "seed", "stop", "n", "best_of", "presence_penalty", "frequency_penalty", "logprobs",
                                 "logit_bias", "user", "ignore_eos", "gamma"};
  if (kind == ApiKind::completion)
    known.insert({"prompt", "echo", "suffix"});
  else
    known.insert({"messages", "max_completion_tokens", "top_logprobs"});
  check_known(body, known);
  read_model(body, c);
  neutral_only(body);

  ApiRequest r;
  r.kind = kind;
  if (kind == ApiKind::completion)
    read_prompt(body, r);
  else
    read_messages(body, c, r);

  GenerationParams& p = r.spec.params;
  const RequestDefaults& d = c.defaults;
  const json* max_tokens = field(body, "max_completion_tokens");
  const char* max_key = "max_completion_tokens";
  if (!max_tokens) {
    max_tokens = field(body, "max_tokens");
    max_key = "max_tokens";
  }
  p.max_tokens = max_tokens ? static_cast<int32_t>(integer(*max_tokens, max_key, 0, 1000000)) : d.max_tokens;
  const json* v = field(body, "temperature");
  p.sampling.temperature = v ? static_cast<float>(number(*v, "temperature", 0, 1000, false)) : d.temperature;
  v = field(body, "top_p");
  p.sampling.top_p = v ? static_cast<float>(number(*v, "top_p", 0, 1, true)) : d.top_p;
  v = field(body, "top_k");  // vLLM's extension; -1 = off as there
  p.sampling.top_k = v ? static_cast<int32_t>(std::max<int64_t>(0, integer(*v, "top_k", -1, INT32_MAX))) : d.top_k;
  v = field(body, "seed");
  p.seed = v ? static_cast<uint64_t>(integer(*v, "seed", 0, INT64_MAX)) : 0;
  v = field(body, "ignore_eos");
  p.stop_at_eos = v ? !boolean(*v, "ignore_eos") : d.stop_at_eos;
  // Any non-negative gamma reads; the scheduler refuses one above the server's max_gamma.
  if ((v = field(body, "gamma"))) r.spec.gamma = static_cast<int32_t>(integer(*v, "gamma", 0, INT32_MAX));
  read_stop(body, r);
  if (kind == ApiKind::chat)
    for (const std::string& s : c.chat_template.turn_stops()) r.spec.stop.push_back(s);
  if ((v = field(body, "stream"))) r.stream = boolean(*v, "stream");
  if ((v = field(body, "stream_options"))) {
    if (!v->is_object()) refuse("stream_options", "stream_options: expected an object");
    for (const auto& [key, value] : v->items())
      if (key != "include_usage") refuse("stream_options", fmt::format("stream_options.{}: unknown field", key));
    if (const json* u = field(*v, "include_usage")) r.include_usage = boolean(*u, "stream_options.include_usage");
  }
  return r;
}

}  // namespace

std::variant<ApiRequest, ApiError> parse_api_request(ApiKind kind, std::string_view body, const ApiContext& context) {
  try {
    return read(kind, body, context);
  } catch (const Refusal& r) {
    return r.error;
  } catch (const json::exception& e) {  // a value that does not fit the type asked
    return ApiError{400, "bad_request", e.what(), ""};
  }
}

std::string error_body(const ApiError& e) {
  const char* type = e.status == 429 ? "rate_limit_error"
                     : e.status >= 500 ? "server_error"
                     : e.status == 404 ? "not_found_error"
                                       : "invalid_request_error";
  json j = {{"error", {{"message", e.message}, {"type", type}, {"param", e.param.empty() ? json(nullptr) : json(e.param)},
                       {"code", e.code}}}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace specpipe::server::http
