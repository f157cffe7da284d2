#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <string_view>

#include "pipeline/pipeline_config_yaml.h"

namespace specpipe {
namespace {

/// Writes the `key: value` lines of one block map. Free-form strings are double-quoted,
/// so a model named "true" or "5" reads back as a string; numbers use the shortest text
/// that reads back as the same value (0.8, not 0.800000012).
class MapWriter {
 public:
  explicit MapWriter(YAML::Emitter& out) : out_(out) {}
  void put(std::string_view key, const std::string& value) {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::DoubleQuoted << value;
  }
  void put(std::string_view key, const char* value) = delete;  // would pick the bool overload
  /// A value from a fixed set of identifiers (cpu, model, warn): plain-safe, unquoted.
  void word(std::string_view key, const std::string& value) { plain(key, value); }
  void put(std::string_view key, bool value) { plain(key, value ? "true" : "false"); }
  void put(std::string_view key, int64_t value) { plain(key, fmt::format("{}", value)); }
  void put(std::string_view key, int32_t value) { put(key, int64_t{value}); }
  void put(std::string_view key, float value) { plain(key, fmt::format("{}", value)); }
  /// Opens the map under `key`; end() closes it.
  MapWriter begin(std::string_view key) {
    out_ << YAML::Key << std::string(key) << YAML::Value << YAML::BeginMap;
    return MapWriter(out_);
  }
  void end() { out_ << YAML::EndMap; }

 private:
  void plain(std::string_view key, const std::string& text) {
    out_ << YAML::Key << std::string(key) << YAML::Value << text;
  }
  YAML::Emitter& out_;
};

void put_builtin_slot(MapWriter& slots, std::string_view slot, const std::string& type) {
  MapWriter s = slots.begin(slot);
  s.word("type", type);
  s.end();
}

}  // namespace

std::string pipeline_config_to_yaml(const PipelineConfig& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  MapWriter top(out);
  top.put("version", c.version);
  MapWriter models = top.begin("models");
  models.put("target", c.models.target);
  models.put("draft", c.models.draft);
  models.put("draft_fused_step", c.models.draft_fused_step);
  models.put("draft_fused_blocks", c.models.draft_fused_blocks);
  models.put("gemm", c.models.gemm);
  models.put("warm_graphs", c.models.warm_graphs);
  models.end();
  top.word("device", c.device);
  top.put("threads", c.threads);
  MapWriter kv = top.begin("kv");
  if (c.kv.tokens == KvConfig::kAuto) kv.put("tokens", std::string("auto"));
  else kv.put("tokens", c.kv.tokens);
  kv.put("block_size", c.kv.block_size);
  kv.put("prefix_cache", c.kv.prefix_cache);
  kv.put("memory_fraction", c.kv.memory_fraction);
  kv.put("dtype", c.kv.dtype);
  kv.end();
  MapWriter offload = top.begin("offload");
  offload.put("enable", c.offload.enable);
  offload.put("host_bytes", c.offload.host_bytes);
  offload.put("ring_slots", c.offload.ring_slots);
  offload.put("overlap", c.offload.overlap);
  offload.word("policy", c.offload.policy);
  offload.word("prefill", c.offload.prefill);
  offload.end();
  MapWriter slots = top.begin("slots");
  MapWriter drafter = slots.begin("drafter");
  drafter.word("type", to_string(c.drafter.type));
  drafter.put("gamma", c.drafter.gamma);
  drafter.put("max_gamma", c.drafter.max_gamma);
  drafter.word("draft_ahead", to_string(c.drafter.draft_ahead));
  MapWriter ngram = drafter.begin("ngram");
  ngram.put("max_n", c.drafter.ngram.max_ngram);
  ngram.put("min_n", c.drafter.ngram.min_ngram);
  ngram.end();
  drafter.end();
  put_builtin_slot(slots, "verify_plan", c.slots.verify_plan);
  put_builtin_slot(slots, "verify_view", c.slots.verify_view);
  put_builtin_slot(slots, "kv_write", c.slots.kv_write);
  put_builtin_slot(slots, "acceptance", "standard");
  slots.end();
  if (!c.plugins.empty()) {
    MapWriter plugins = top.begin("plugins");
    for (const PluginConfig& p : c.plugins) {
      MapWriter entry = plugins.begin(p.name);
      entry.put("path", p.path);
      // JSON is YAML: the config block reads back as the same map.
      out << YAML::Key << "config" << YAML::Value << YAML::Flow << YAML::Load(p.config_json);
      entry.end();
    }
    plugins.end();
  }
  MapWriter scheduler = top.begin("scheduler");
  scheduler.put("max_batch", c.scheduler.max_batch);
  scheduler.put("max_queue", c.scheduler.max_queue);
  scheduler.put("prefill_chunk", c.scheduler.prefill_chunk);
  scheduler.put("actor_threads", c.scheduler.actor_threads);
  scheduler.put("micro_batches", c.scheduler.micro_batches);
  scheduler.end();
  MapWriter server = top.begin("server");
  server.put("endpoint", c.server.endpoint);
  server.put("max_message_bytes", c.server.max_message_bytes);
  server.put("max_inflight", c.server.max_inflight);
  server.put("max_inflight_per_client", c.server.max_inflight_per_client);
  server.put("shutdown_grace_ms", c.server.shutdown_grace_ms);
  server.put("heartbeat_timeout_ms", c.server.heartbeat_timeout_ms);
  if (!c.server.http.empty()) server.put("http", c.server.http);  // absent = off (an empty string is refused)
  server.put("http_timeout_ms", c.server.http_timeout_ms);
  if (c.server.curve.enabled()) {  // absent = off
    MapWriter curve = server.begin("curve");
    // A secret written inline stays out of what is printed (validate-config's output
    // lands in terminals and logs); a key file's path is shown.
    const std::string& secret = c.server.curve.secret_key;
    curve.put("secret_key", is_inline_curve_key(secret) ? std::string("(inline secret key, not shown)") : secret);
    out << YAML::Key << "allowed_clients" << YAML::Value << YAML::BeginSeq;
    for (const std::string& key : c.server.curve.allowed_clients) out << YAML::DoubleQuoted << key;
    out << YAML::EndSeq;
    curve.end();
  }
  server.put("allow_insecure", c.server.allow_insecure);
  server.end();
  MapWriter defaults = top.begin("defaults");
  defaults.put("max_tokens", c.defaults.max_tokens);
  defaults.put("temperature", c.defaults.temperature);
  defaults.put("top_k", c.defaults.top_k);
  defaults.put("top_p", c.defaults.top_p);
  defaults.put("stop_at_eos", c.defaults.stop_at_eos);
  defaults.end();
  MapWriter logging = top.begin("logging");
  logging.word("level", c.log_level);
  logging.end();
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace specpipe
