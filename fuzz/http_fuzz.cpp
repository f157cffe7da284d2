// libFuzzer harness: the bytes a client sends the HTTP gateway (server/http/), read as the
// session reads them: Beast's request parser with the session's head limit (16 KiB) and a
// body limit, one request after another on the same connection (pipelining), then the
// session's routing and, for the completion routes, parse_api_request with a ChatML
// template and with the demo model's (none), and the prompt admission with the demo
// tokenizer. Nothing may throw; a refused body has a 4xx status and an error body that is
// one JSON object; an accepted one has every field in range. The session's socket and
// timer handling is not here (the soak, scripts/soak.sh, drives that over real sockets).
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "model/tokenizer/tokenizer.h"
#include "pipeline/pipeline_config.h"
#include "server/http/chat_template.h"
#include "server/http/openai_request.h"

#ifndef SPECPIPE_FUZZ_ROOT
#error "SPECPIPE_FUZZ_ROOT: the source tree, where models/demo-target lives (scripts/fuzz.sh sets it)"
#endif

namespace {
namespace bhttp = boost::beast::http;
namespace sh = specpipe::server::http;

constexpr size_t kHeaderLimit = 16 * 1024;  // as http_session.cpp
constexpr uint64_t kBodyLimit = 8 * 1024;   // server.max_message_bytes, small to be reachable

const std::string kRoot = SPECPIPE_FUZZ_ROOT;
const std::string kModelName = "demo-target";
const std::string kModelPath = kRoot + "/models/demo-target";

void check_body(sh::ApiKind kind, std::string_view body, const sh::ChatTemplate& chat_template) {
  static const specpipe::RequestDefaults defaults;
  static const specpipe::Tokenizer tok = specpipe::Tokenizer::from_file(kModelPath + "/tokenizer.json");
  const sh::ApiContext context{defaults, chat_template, kModelName, kModelPath};
  const auto parsed = sh::parse_api_request(kind, body, context);
  if (const auto* e = std::get_if<sh::ApiError>(&parsed)) {
    if (e->status < 400 || e->status > 499 || e->code.empty() || e->message.empty()) std::abort();
    const auto j = nlohmann::json::parse(sh::error_body(*e));  // throws: a bug
    if (!j.is_object() || !j["error"].is_object() || j["error"]["code"] != e->code) std::abort();
    return;
  }
  const auto& r = std::get<sh::ApiRequest>(parsed);
  const auto& p = r.spec.params;
  if (r.prompt_text ? r.prompt_text->empty() : r.spec.prompt.empty()) std::abort();
  if (p.max_tokens < 0 || !std::isfinite(p.sampling.temperature) || p.sampling.temperature < 0 ||
      p.sampling.top_k < 0 || !(p.sampling.top_p > 0 && p.sampling.top_p <= 1))
    std::abort();
  for (const int32_t t : r.spec.prompt)
    if (t < 0) std::abort();
  if (r.prompt_text)
    for (const int32_t t : tok.encode(*r.prompt_text))  // text from JSON is valid UTF-8: never throws
      if (t < 0 || t >= tok.vocab_size()) std::abort();
}

/// The session's route() decisions for one request that was read whole.
void route(const bhttp::request<bhttp::string_body>& request) {
  static const sh::ChatTemplate chatml = sh::ChatTemplate::chatml();
  static const sh::ChatTemplate demo = sh::ChatTemplate::load(kModelPath);  // none: chat refused
  std::string_view path(request.target().data(), request.target().size());
  path = path.substr(0, path.find('?'));
  if (request.method() != bhttp::verb::post) return;
  if (path == "/v1/completions") check_body(sh::ApiKind::completion, request.body(), chatml);
  if (path == "/v1/chat/completions") {
    check_body(sh::ApiKind::chat, request.body(), chatml);
    check_body(sh::ApiKind::chat, request.body(), demo);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (true) {
    bhttp::request_parser<bhttp::string_body> parser;
    parser.header_limit(kHeaderLimit);
    parser.body_limit(kBodyLimit);
    parser.eager(true);
    boost::beast::error_code ec;
    while (!rest.empty() && !parser.is_done()) {
      const size_t used = parser.put(boost::asio::buffer(rest.data(), rest.size()), ec);
      rest.remove_prefix(used);
      if (ec == bhttp::error::need_more) {
        if (used == 0) break;  // the rest is not enough for the next step: end of stream
        ec = {};
        continue;
      }
      if (ec) return 0;  // the session answers 400/413/431 and closes
    }
    if (!parser.is_done()) {
      if (!parser.got_some()) return 0;
      parser.put_eof(ec);  // the client closed: complete only where the message allows
      if (ec || !parser.is_done()) return 0;
    }
    const auto request = parser.release();
    route(request);
    if (!request.keep_alive()) return 0;  // the session closes after its response
  }
}
