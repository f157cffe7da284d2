// libFuzzer harness: one ZeroMQ message of arbitrary bytes through the request protocol
// (server/protocol.h, docs/PROTOCOL.md) and the prompt admission with the demo
// tokenizer. parse_request never throws; a Rejection carries a code of PROTOCOL.md's table
// and its error reply is one JSON object that echoes the id; an accepted request has every
// field within the documented ranges; a cancel's reply is valid JSON.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <variant>

#include "core/error.h"
#include "model/tokenizer/tokenizer.h"
#include "server/protocol.h"

#ifndef SPECPIPE_FUZZ_ROOT
#error "SPECPIPE_FUZZ_ROOT: the source tree, where models/demo-target lives (scripts/fuzz.sh sets it)"
#endif

namespace {
using specpipe::server::Rejection;
using specpipe::server::Request;
using specpipe::server::RequestType;

void check_rejection(const Rejection& r) {
  static const std::set<std::string> codes = {"malformed_json", "too_large", "unsupported_version", "bad_request",
                                              "unknown_type"};
  if (!codes.count(r.code) || r.message.empty()) std::abort();
  const auto reply = nlohmann::json::parse(specpipe::server::error_reply(r.id, r.code, r.message));  // throws: a bug
  if (!reply.is_object() || reply["type"] != "error" || reply["code"] != r.code) std::abort();
  if (r.id ? reply["id"] != *r.id : !reply["id"].is_null()) std::abort();
}

void check_request(const Request& r) {
  if (r.id.empty() || r.id.size() > 128) std::abort();
  if (r.type == RequestType::cancel) {
    if (r.target.empty() || r.target.size() > 128) std::abort();
    (void)nlohmann::json::parse(specpipe::server::cancelled_reply(r.id, r.target));
  }
  if (r.type != RequestType::generate) return;
  const auto& p = r.spec.params;
  if (r.prompt_text ? r.prompt_text->empty() : r.spec.prompt.empty()) std::abort();
  if (p.max_tokens < 0 || !std::isfinite(p.sampling.temperature) || p.sampling.temperature < 0 ||
      p.sampling.top_k < 0 || !(p.sampling.top_p > 0 && p.sampling.top_p <= 1) || r.spec.gamma < -1 ||
      r.spec.gamma > 1024)
    std::abort();
  for (const int32_t t : r.spec.prompt)
    if (t < 0) std::abort();
  for (const auto& s : r.spec.stop)
    if (s.empty()) std::abort();
  // What admission does next (server/admission.cpp): the text through the target's tokenizer.
  static const specpipe::Tokenizer tok =
      specpipe::Tokenizer::from_file(SPECPIPE_FUZZ_ROOT "/models/demo-target/tokenizer.json");
  if (r.prompt_text) {
    for (const int32_t t : tok.encode(*r.prompt_text))  // JSON strings are valid UTF-8: never throws
      if (t < 0 || t >= tok.vocab_size()) std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const specpipe::RequestDefaults defaults;
  // The default server.max_message_bytes is 1 MiB; 4 KiB makes too_large reachable here.
  const auto parsed = specpipe::server::parse_request(std::string_view(reinterpret_cast<const char*>(data), size),
                                                      defaults, 4096);
  if (const auto* rejection = std::get_if<Rejection>(&parsed))
    check_rejection(*rejection);
  else
    check_request(std::get<Request>(parsed));
  return 0;
}
