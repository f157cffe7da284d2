#include "specpv_config.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

namespace specpv {

int64_t SpecpvConfig::budget() const {
  return int64_t{sink_tokens} + int64_t{retrieval_blocks()} * block_size + window_tokens + buffer_tokens;
}

SpecpvConfig parse_config(const std::string& json, int32_t block_size) {
  auto bad = [](const std::string& m) { return std::invalid_argument("specpv: config: " + m); };
  if (block_size < 1) throw bad("block size " + std::to_string(block_size) + " from the host");
  const nlohmann::json j = json.empty() ? nlohmann::json::object() : nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object");
  SpecpvConfig c;
  c.block_size = block_size;
  auto integer = [&](const char* key, int32_t& out, int32_t min) {
    if (!j.contains(key)) return;
    const auto& v = j.at(key);
    if (!v.is_number_integer()) throw bad(std::string(key) + ": not an integer");
    const auto x = v.get<int64_t>();
    if (x < min || x > (1 << 30)) throw bad(std::string(key) + ": " + std::to_string(x) + " is not in [" + std::to_string(min) + ", 2^30]");
    out = static_cast<int32_t>(x);
  };
  for (const auto& e : j.items()) {
    static const char* const known[] = {"mode", "sink", "retrieval", "window", "buffer", "refresh_interval",
                                        "adaptive_interval", "retrieval_by"};
    bool ok = false;
    for (const char* k : known) ok |= e.key() == k;
    if (!ok) throw bad("unknown key '" + e.key() + "' (known: mode, sink, retrieval, window, buffer, refresh_interval, "
                "adaptive_interval, retrieval_by)");
  }
  if (j.contains("mode")) {
    const auto& m = j.at("mode");
    if (!m.is_string() || (m != "exact" && m != "approximate")) throw bad("mode: must be \"exact\" or \"approximate\"");
    c.approximate = m == "approximate";
  }
  if (j.contains("retrieval_by")) {
    const auto& m = j.at("retrieval_by");
    if (!m.is_string() || (m != "quest" && m != "attention_mass"))
      throw bad("retrieval_by: must be \"attention_mass\" or \"quest\"");
    c.by_mass = m == "attention_mass";
  }
  if (j.contains("adaptive_interval")) {
    if (!j.at("adaptive_interval").is_boolean()) throw bad("adaptive_interval: not true or false");
    c.adaptive_interval = j.at("adaptive_interval").get<bool>();
  }
  integer("sink", c.sink_tokens, 0);
  integer("retrieval", c.retrieval_tokens, 0);
  integer("window", c.window_tokens, 0);
  integer("buffer", c.buffer_tokens, 0);
  integer("refresh_interval", c.refresh_interval, 0);
  if (c.refresh_interval < 1) throw bad("refresh_interval: 0 would never verify fully; use 1 or more rounds");
  if (c.retrieval_blocks() < 1)
    throw bad("retrieval: " + std::to_string(c.retrieval_tokens) + " tokens is less than one block of " +
              std::to_string(block_size) + " (zero retrieval blocks)");
  return c;
}

}  // namespace specpv
