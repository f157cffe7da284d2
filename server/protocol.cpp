#include "server/protocol.h"
#include "pipeline/view_stats_json.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <set>

namespace specpipe::server {
namespace {

using nlohmann::json;

/// Thrown inside the parser only; parse_request turns it into a Rejection.
struct Bad {
  std::string code, message;
};

[[noreturn]] void bad(std::string message) { throw Bad{"bad_request", std::move(message)}; }

int64_t get_int(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) bad(fmt::format("{}: expected an integer", key));
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi) bad(fmt::format("{}: {} is out of range [{}, {}]", key, x, lo, hi));
  return x;
}

double get_number(const json& j, const char* key, double lo, double hi, bool lo_open) {
  const json& v = j.at(key);
  if (!v.is_number()) bad(fmt::format("{}: expected a number", key));
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
    bad(fmt::format("{}: {} is out of range {}{}, {}]", key, x, lo_open ? "(" : "[", lo, hi));
  return x;
}

bool get_bool(const json& j, const char* key) {
  const json& v = j.at(key);
  if (!v.is_boolean()) bad(fmt::format("{}: expected true or false", key));
  return v.get<bool>();
}

std::string get_string(const json& j, const char* key, size_t max_len) {
  const json& v = j.at(key);
  if (!v.is_string()) bad(fmt::format("{}: expected a string", key));
  std::string s = v.get<std::string>();
  if (s.empty() || s.size() > max_len) bad(fmt::format("{}: must have 1 to {} characters", key, max_len));
  return s;
}

void check_known(const json& j, const std::set<std::string>& known) {
  for (const auto& [key, value] : j.items())
    if (!known.count(key)) bad(fmt::format("{}: unknown field", key));
}

void parse_generate(const json& j, const RequestDefaults& d, Request& r) {
  check_known(j, {"v", "id", "type", "prompt", "prompt_ids", "max_tokens", "temperature", "top_k", "top_p", "seed",
                  "stop", "ignore_eos", "stream", "gamma"});
  const bool has_text = j.contains("prompt"), has_ids = j.contains("prompt_ids");
  if (has_text == has_ids) bad("exactly one of prompt and prompt_ids is required");
  if (has_text) {
    if (!j["prompt"].is_string()) bad("prompt: expected a string");
    r.prompt_text = j["prompt"].get<std::string>();
    if (r.prompt_text->empty()) bad("prompt: must not be empty");
  } else {
    const json& ids = j["prompt_ids"];
    if (!ids.is_array() || ids.empty()) bad("prompt_ids: expected a non-empty array of token ids");
    for (const json& t : ids) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
        bad("prompt_ids: every element must be a non-negative integer token id");
      r.spec.prompt.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
  }
  GenerationParams& p = r.spec.params;
  p.max_tokens = j.contains("max_tokens") ? static_cast<int32_t>(get_int(j, "max_tokens", 0, 1000000)) : d.max_tokens;
  p.sampling.temperature = j.contains("temperature") ? static_cast<float>(get_number(j, "temperature", 0, 1000, false))
                                                     : d.temperature;
  p.sampling.top_k = j.contains("top_k") ? static_cast<int32_t>(get_int(j, "top_k", 0, INT32_MAX)) : d.top_k;
  p.sampling.top_p = j.contains("top_p") ? static_cast<float>(get_number(j, "top_p", 0, 1, true)) : d.top_p;
  p.seed = j.contains("seed") ? static_cast<uint64_t>(get_int(j, "seed", 0, INT64_MAX)) : 0;
  p.stop_at_eos = j.contains("ignore_eos") ? !get_bool(j, "ignore_eos") : d.stop_at_eos;
  r.stream = j.contains("stream") && get_bool(j, "stream");
  // Any non-negative gamma reads; the scheduler refuses one above the server's max_gamma.
  if (j.contains("gamma")) r.spec.gamma = static_cast<int32_t>(get_int(j, "gamma", 0, INT32_MAX));
  if (j.contains("stop")) {
    const json& stop = j["stop"];
    if (!stop.is_array()) bad("stop: expected an array of strings");
    for (const json& s : stop) {
      if (!s.is_string() || s.get<std::string>().empty()) bad("stop: every element must be a non-empty string");
      r.spec.stop.push_back(s.get<std::string>());
    }
  }
}

Request parse(std::string_view bytes, const RequestDefaults& d, size_t max_bytes, std::optional<std::string>& id) {
  if (bytes.size() > max_bytes) throw Bad{"too_large", fmt::format("message of {} bytes exceeds the limit of {}", bytes.size(), max_bytes)};
  json j;
  try {
    j = json::parse(bytes);
  } catch (const json::exception& e) {
    throw Bad{"malformed_json", e.what()};
  }
  if (!j.is_object()) throw Bad{"malformed_json", "the message must be a JSON object"};
  if (j.contains("id") && j["id"].is_string() && !j["id"].get<std::string>().empty() &&
      j["id"].get<std::string>().size() <= 128)
    id = j["id"].get<std::string>();
  if (j.contains("v") && !(j["v"].is_number_integer() && j["v"].get<int64_t>() == kProtocolVersion))
    throw Bad{"unsupported_version", fmt::format("this server speaks protocol version {}", kProtocolVersion)};
  Request r;
  r.id = get_string(j, "id", 128);
  if (!j.contains("type") || !j["type"].is_string()) bad("type: expected a string");
  const std::string type = j["type"].get<std::string>();
  if (type == "generate") {
    r.type = RequestType::generate;
    parse_generate(j, d, r);
  } else if (type == "cancel") {
    r.type = RequestType::cancel;
    check_known(j, {"v", "id", "type", "target"});
    if (!j.contains("target")) bad("target: the id of the request to cancel is required");
    r.target = get_string(j, "target", 128);
  } else if (type == "stats" || type == "health") {
    r.type = type == "stats" ? RequestType::stats : RequestType::health;
    check_known(j, {"v", "id", "type"});
  } else {
    throw Bad{"unknown_type", fmt::format("type '{}' is not generate, cancel, stats or health", type)};
  }
  return r;
}

json base(std::string_view type, const std::optional<std::string>& id) {
  json j;
  j["v"] = kProtocolVersion;
  j["id"] = id ? json(*id) : json(nullptr);
  j["type"] = type;
  return j;
}

}  // namespace

std::variant<Request, Rejection> parse_request(std::string_view bytes, const RequestDefaults& defaults,
                                               size_t max_bytes) {
  std::optional<std::string> id;
  try {
    return parse(bytes, defaults, max_bytes, id);
  } catch (const Bad& b) {
    return Rejection{id, b.code, b.message};
  } catch (const json::exception& e) {  // e.g. a number that does not fit the type asked
    return Rejection{id, "bad_request", e.what()};
  }
}

std::string error_reply(const std::optional<std::string>& id, std::string_view code, std::string_view message) {
  json j = base("error", id);
  j["code"] = code;
  j["message"] = message;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string delta_reply(const std::string& id, const actors::TokenDelta& delta) {
  json j = base("delta", id);
  j["tokens"] = delta.tokens;
  j["text"] = delta.text;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

nlohmann::json stats_json(const SpecStats& s) {
  nlohmann::json j = {{"requests", s.requests},
          {"rounds", s.rounds},
          {"proposed", s.proposed},
          {"accepted", s.accepted},
          {"acceptance_rate", s.acceptance_rate()},
          {"tokens_per_target_step", s.tokens_per_step()},
          {"accepted_hist", s.accepted_hist},
          {"generated", s.generated},
          {"prompt_tokens", s.prompt_tokens},
          {"cached_prompt_tokens", s.cached_prompt_tokens},
          {"draft_failures", s.draft_failures},
          {"drafted_ahead", s.drafted_ahead},
          {"prefill_ms", s.prefill_ms},
          {"draft_ms", s.draft_ms},
          {"verify_ms", s.verify_ms},
          {"commit_ms", s.commit_ms},
          {"messaging_ms", s.messaging_ms},
          {"queued_ms", s.queued_ms},
          {"wall_ms", s.wall_ms}};
  // scheduler.micro_batches > 1: only where rounds were in flight together.
  if (s.max_rounds_in_flight > 1) {
    j["overlapped_rounds"] = s.overlapped_rounds;
    j["max_rounds_in_flight"] = s.max_rounds_in_flight;
  }
  // SpecPV (slot verify_view): only where a partial view was used.
  if (s.view.partial_rounds() > 0) j["verify_view"] = view_stats_json(s.view);
  return j;
}

nlohmann::json kv_json(const KvOccupancy& kv) {
  nlohmann::json j = {{"free_blocks", kv.free_blocks}, {"total_blocks", kv.total_blocks}, {"sequences", kv.sequences}};
  if (kv.host_total_blocks > 0) {  // offload: the host tier
    j["host_free_blocks"] = kv.host_free_blocks;
    j["host_total_blocks"] = kv.host_total_blocks;
  }
  return j;
}

std::string final_reply(const std::string& id, const actors::Completion& c) {
  if (c.reason == FinishReason::error) return error_reply(id, c.error_code.empty() ? "internal" : c.error_code, c.error);
  json j = base("final", id);
  j["tokens"] = c.tokens;
  j["text"] = c.text;
  j["finish_reason"] = to_string(c.reason);
  j["prompt_tokens"] = c.stats.prompt_tokens;
  j["stats"] = stats_json(c.stats);
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string cancelled_reply(const std::string& id, const std::string& target) {
  json j = base("cancelled", id);
  j["target"] = target;
  return j.dump();
}

}  // namespace specpipe::server
