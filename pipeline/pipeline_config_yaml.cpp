// The pipeline YAML schema: which keys exist, their types and ranges (docs/CONFIG.md is
// the same table for people), and the checks that span keys. The typed reading lives
// in config_section.h; this file only says what to read.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "model/load_model.h"
#include "pipeline/config_section.h"
#include "pipeline/gamma.h"
#include "pipeline/pipeline_config.h"
#include "pipeline/plugin_library.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

namespace specpipe {
namespace {

namespace fs = std::filesystem;
using config_yaml::IntRange;
using config_yaml::RealRange;
using config_yaml::Section;

constexpr int64_t kMillion = 1'000'000;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr double kInf = std::numeric_limits<double>::infinity();

void read_kv(const Section& top, KvConfig& kv) {
  const Section s = top.child("kv", {"tokens", "block_size", "prefix_cache", "memory_fraction", "dtype"});
  std::string tokens;
  s.read("tokens", tokens);  // any scalar, as text: "auto" or a number
  if (tokens == "auto") kv.tokens = KvConfig::kAuto;
  else s.read("tokens", kv.tokens, IntRange{1, int64_t{1} << 31});
  s.read("block_size", kv.block_size, IntRange{1, 1024});
  s.read("prefix_cache", kv.prefix_cache);
  s.read("memory_fraction", kv.memory_fraction, RealRange{0, 1, /*lo_open=*/true});
  s.read_choice("dtype", kv.dtype, {"fp32", "bf16"});
  if (kv.tokens != KvConfig::kAuto && kv.tokens < kv.block_size)
    s.fail("tokens", fmt::format("{} is less than kv.block_size ({}): the pool must hold a block",
                                 kv.tokens, kv.block_size));
}

void read_offload(const Section& top, OffloadConfig& o) {
  const Section s = top.child("offload", {"enable", "host_bytes", "ring_slots", "overlap", "policy", "prefill"});
  s.read("enable", o.enable);
  s.read("host_bytes", o.host_bytes, IntRange{1, int64_t{1} << 50});
  s.read("ring_slots", o.ring_slots, IntRange{2, 64});
  s.read("overlap", o.overlap);
  s.read_choice("policy", o.policy, {"longest"});
  s.read_choice("prefill", o.prefill, {"layerwise", "chunked"});
}

void read_drafter(const Section& slots, DrafterConfig& d) {
  const Section s = slots.child("drafter", {"type", "gamma", "max_gamma", "ngram", "draft_ahead"});
  std::string type = to_string(d.type);
  s.read_choice("type", type, {"model", "ngram", "none"});
  d.type = parse_drafter_kind(type);
  // What the models allow is checked when they are opened (pipeline/gamma.h).
  s.read("gamma", d.gamma, IntRange{0, INT32_MAX});
  s.read("max_gamma", d.max_gamma, IntRange{0, INT32_MAX});
  if (auto problem = gamma_config_problem(d, nullptr)) s.fail(problem->key, problem->reason);
  std::string ahead = to_string(d.draft_ahead);
  s.read_choice("draft_ahead", ahead, {"auto", "on", "off"});
  d.draft_ahead = parse_draft_ahead(ahead);
  const Section ngram = s.child("ngram", {"max_n", "min_n"});
  ngram.read("max_n", d.ngram.max_ngram, IntRange{1, 16});
  ngram.read("min_n", d.ngram.min_ngram, IntRange{1, 16});
  if (d.ngram.min_ngram > d.ngram.max_ngram)
    ngram.fail("min_n", fmt::format("{} is greater than max_n ({})", d.ngram.min_ngram, d.ngram.max_ngram));
}

/// A slot filled by its built-in strategy or by a plugin declared under `plugins`.
void read_strategy_slot(const Section& slots, std::string_view slot, std::string& type,
                        const std::vector<PluginConfig>& plugins) {
  const Section s = slots.child(slot, {"type"});
  s.read("type", type);
  const std::string builtin = slot == "kv_write" ? "direct" : slot == "verify_view" ? "full" : "fixed";
  if (type == builtin) return;
  for (const PluginConfig& p : plugins)
    if (p.name == type) return;
  std::string known = builtin;
  for (const PluginConfig& p : plugins) known += ", " + p.name;
  s.fail("type", fmt::format("unknown value \"{}\" (known: {}; a plugin must be declared under plugins)", type, known));
}

void read_slots(const Section& top, DrafterConfig& drafter, SlotStrategies& strategies,
                const std::vector<PluginConfig>& plugins) {
  const Section s = top.child("slots", {"drafter", "verify_plan", "verify_view", "kv_write", "acceptance"});
  read_drafter(s, drafter);
  read_strategy_slot(s, "verify_plan", strategies.verify_plan, plugins);
  read_strategy_slot(s, "verify_view", strategies.verify_view, plugins);
  read_strategy_slot(s, "kv_write", strategies.kv_write, plugins);
  std::string acceptance = "standard";
  s.child("acceptance", {"type"}).read_choice("type", acceptance, {"standard"});
}

/// What a plugin's config may expand to: each value costs 8 bytes plus its text (and its
/// key's, in a map). YAML aliases share one node, so a few hundred bytes of nested aliases
/// expand to billions of JSON values, or a long string to gigabytes.
constexpr size_t kMaxPluginConfigBytes = 1 << 20;
struct TooManyValues {};

/// A YAML value as JSON: maps and lists recursively; plain scalars as booleans,
/// integers, reals or null when they read as one; quoted scalars stay strings. Throws
/// TooManyValues once the `left` bytes are used up.
nlohmann::json yaml_to_json(const YAML::Node& node, size_t& left) {
  const size_t cost = 8 + (node.IsScalar() ? node.Scalar().size() : 0);
  if (cost > left) throw TooManyValues{};
  left -= cost;
  if (!node.IsDefined() || node.IsNull()) return nullptr;
  if (node.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& e : node) {
      const std::string& key = e.first.Scalar();
      if (key.size() > left) throw TooManyValues{};
      left -= key.size();
      j[key] = yaml_to_json(e.second, left);
    }
    return j;
  }
  if (node.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : node) j.push_back(yaml_to_json(e, left));
    return j;
  }
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted
  if (text == "true" || text == "false") return text == "true";
  try {
    size_t used = 0;
    const long long i = std::stoll(text, &used);
    if (used == text.size()) return i;
    const double d = std::stod(text, &used);
    if (used == text.size()) return d;
  } catch (...) {
  }
  return text;
}

/// plugins: {<name>: {path: <file or name>, config: {...}}}
std::vector<PluginConfig> read_plugins(const Section& top, const YAML::Node& root,
                                       const std::optional<fs::path>& config_dir) {
  std::vector<PluginConfig> out;
  const YAML::Node node = root.IsMap() ? root["plugins"] : YAML::Node();
  if (!node.IsDefined() || node.IsNull()) return out;
  if (!node.IsMap()) top.fail("plugins", "expected a map of plugin names to {path, config}");
  for (const auto& entry : node) {
    PluginConfig p;
    p.name = entry.first.Scalar();
    const bool valid_name = !p.name.empty() && std::all_of(p.name.begin(), p.name.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
    if (!valid_name) top.fail("plugins", fmt::format("plugin name \"{}\" must be letters, digits, _ or -", p.name));
    if (p.name == "direct" || p.name == "fixed") top.fail("plugins", fmt::format("\"{}\" is a built-in strategy's name", p.name));
    const Section s(entry.second, "plugins." + p.name, top.source(), {"path", "config"});
    p.path = p.name;
    s.read("path", p.path);
    const YAML::Node config = entry.second.IsMap() ? entry.second["config"] : YAML::Node();
    if (config.IsDefined() && !config.IsNull() && !config.IsMap()) s.fail("config", "expected a map");
    // yaml-cpp passes any bytes through; JSON (the plugin's config string) takes UTF-8 only.
    try {
      size_t left = kMaxPluginConfigBytes;
      p.config_json = config.IsDefined() && !config.IsNull() ? yaml_to_json(config, left).dump() : "{}";
    } catch (const nlohmann::json::type_error&) {
      s.fail("config", "holds text that is not valid UTF-8");
    } catch (const TooManyValues&) {
      s.fail("config", fmt::format("expands to more than {} bytes (8 per value plus its text, YAML aliases expanded)",
                                   kMaxPluginConfigBytes));
    }
    // A path relative to the config file wins; else the plugin search path decides.
    if (config_dir && fs::path(p.path).is_relative() && fs::is_regular_file(*config_dir / p.path)) {
      p.path = (*config_dir / p.path).lexically_normal().string();
    } else {
      try {
        p.path = resolve_plugin_path(p.path).string();
      } catch (const Error& e) {
        s.fail("path", e.what());
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

void read_scheduler(const Section& top, SchedulerSection& c) {
  const Section s = top.child("scheduler", {"max_batch", "max_queue", "prefill_chunk", "actor_threads", "micro_batches"});
  s.read("max_batch", c.max_batch, IntRange{1, 4096});
  s.read("max_queue", c.max_queue, IntRange{1, kMillion});
  s.read("prefill_chunk", c.prefill_chunk, IntRange{1, 65536});
  s.read("actor_threads", c.actor_threads, IntRange{1, 64});
  s.read("micro_batches", c.micro_batches, IntRange{1, 16});
}

/// "HOST:PORT" with a non-empty host and a port of 0-65535 (the HTTP gateway resolves the host).
bool is_http_bind_address(const std::string& a) {
  const size_t colon = a.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == a.size() || a.size() - colon - 1 > 5) return false;
  const std::string port = a.substr(colon + 1);
  return std::all_of(port.begin(), port.end(), [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)); }) &&
         std::stoi(port) <= 65535;
}

/// A CURVE key as configured: 40 characters of the Z85 alphabet (the key itself), else
/// the path of a key file, which must exist (resolved against the config file's
/// directory). The key's bytes are checked where they are used (server/curve_keys.h).
std::string read_curve_key(const Section& s, std::string_view key, std::string value,
                           const std::optional<fs::path>& config_dir) {
  if (is_inline_curve_key(value)) return value;
  fs::path path(value);
  if (config_dir && path.is_relative()) path = (*config_dir / path).lexically_normal();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    s.fail(key, fmt::format("\"{}\" is neither a 40-character Z85 key nor a key file (specpipe keygen writes them)",
                            value));
  return path.string();
}

/// server.curve: {secret_key: KEY|FILE, allowed_clients: [KEY|FILE, ...]}
void read_curve(const Section& server, const YAML::Node& root, CurveConfig& c,
                const std::optional<fs::path>& config_dir) {
  const Section s = server.child("curve", {"secret_key", "allowed_clients"});
  if (!s.has("secret_key") && !s.has("allowed_clients")) return;
  std::string secret;
  s.read("secret_key", secret);
  if (secret.empty()) s.fail("secret_key", "missing: CURVE needs the server's secret key");
  c.secret_key = read_curve_key(s, "secret_key", secret, config_dir);
  const YAML::Node list = root["server"]["curve"]["allowed_clients"];
  if (!list.IsDefined() || list.IsNull() || !list.IsSequence() || list.size() == 0)
    s.fail("allowed_clients", "expected a non-empty list of client public keys (Z85 keys or .pub files)");
  for (const YAML::Node& item : list) {
    if (!item.IsScalar() || item.Scalar().empty()) s.fail("allowed_clients", "every entry must be a key or a file");
    c.allowed_clients.push_back(read_curve_key(s, "allowed_clients", item.Scalar(), config_dir));
  }
}

void read_server(const Section& top, const YAML::Node& root, ServerConfig& c,
                 const std::optional<fs::path>& config_dir) {
  const Section s = top.child("server", {"endpoint", "max_message_bytes", "max_inflight", "max_inflight_per_client",
                                         "shutdown_grace_ms", "heartbeat_timeout_ms", "http", "http_timeout_ms", "curve",
                                         "allow_insecure"});
  s.read("endpoint", c.endpoint);
  bool known_transport = false;
  for (const std::string_view scheme : {"tcp://", "ipc://", "inproc://"})
    known_transport |= c.endpoint.starts_with(scheme) && c.endpoint.size() > scheme.size();
  if (!known_transport)
    s.fail("endpoint", fmt::format("\"{}\" is not a ZeroMQ address (tcp://, ipc:// or inproc://, then the address)",
                                   c.endpoint));
  s.read("max_message_bytes", c.max_message_bytes, IntRange{256, int64_t{1} << 30});
  s.read("max_inflight", c.max_inflight, IntRange{1, kMillion});
  s.read("max_inflight_per_client", c.max_inflight_per_client, IntRange{1, kMillion});
  s.read("shutdown_grace_ms", c.shutdown_grace_ms, IntRange{0, 600'000});
  s.read("heartbeat_timeout_ms", c.heartbeat_timeout_ms, IntRange{100, 600'000});
  s.read("http", c.http);
  if (!c.http.empty() && !is_http_bind_address(c.http))
    s.fail("http", fmt::format("\"{}\" is not HOST:PORT (e.g. 127.0.0.1:8000; port 0 picks a free one)", c.http));
  s.read("http_timeout_ms", c.http_timeout_ms, IntRange{100, 600'000});
  read_curve(s, root, c.curve, config_dir);
  s.read("allow_insecure", c.allow_insecure);
}

void read_defaults(const Section& top, RequestDefaults& c) {
  const Section s = top.child("defaults", {"max_tokens", "temperature", "top_k", "top_p", "stop_at_eos"});
  s.read("max_tokens", c.max_tokens, IntRange{0, kMillion});
  s.read("temperature", c.temperature, RealRange{0, kInf});
  s.read("top_k", c.top_k, IntRange{0, kInt32Max});
  s.read("top_p", c.top_p, RealRange{0, 1, /*lo_open=*/true});
  s.read("stop_at_eos", c.stop_at_eos);
}

void read_device(const Section& top, std::string& device) {
  top.read("device", device);
  try {
    device = Device::parse(device).to_string();  // "cuda" is "cuda:0"
  } catch (const Error&) {
    top.fail("device", fmt::format("expected cpu or cuda:N, got \"{}\"", device));
  }
}

/// Keeps a model value the engine can resolve again (resolve_model_dir) from any working
/// directory: a directory relative to the config file becomes that absolute path; a
/// name or any other directory stays as written once it is known to resolve.
void resolve_model(const Section& models, std::string_view key, std::string& value,
                   const std::optional<fs::path>& config_dir) {
  std::optional<fs::path> beside;
  if (config_dir && fs::path(value).is_relative()) {
    beside = (*config_dir / value).lexically_normal();
    std::error_code ec;  // a name the file system refuses is simply not there
    if (fs::is_directory(*beside, ec)) {
      value = beside->string();
      return;
    }
  }
  try {
    resolve_model_dir(value);
  } catch (const Error& e) {
    models.fail(key, beside ? fmt::format("{}, nor beside the config file ({})", e.what(), beside->string())
                            : std::string(e.what()));
  }
}

PipelineConfig read_document(const YAML::Node& root, std::string_view source,
                             const std::optional<fs::path>& config_dir) {
  PipelineConfig c;
  const Section top(root, "", std::string(source),
                    {"version", "models", "device", "threads", "kv", "offload", "slots", "scheduler", "server",
                     "defaults", "logging", "plugins"});
  top.read("version", c.version, IntRange{std::numeric_limits<int32_t>::min(), kInt32Max});
  if (c.version != 1) top.fail("version", fmt::format("version {} is not supported (this build reads 1)", c.version));
  const Section models = top.child("models", {"target", "draft", "draft_fused_step", "draft_fused_blocks", "gemm", "warm_graphs"});
  models.read("target", c.models.target);
  models.read("draft", c.models.draft);
  models.read("draft_fused_step", c.models.draft_fused_step);
  models.read("draft_fused_blocks", c.models.draft_fused_blocks, IntRange{0, 1024});
  models.read_choice("gemm", c.models.gemm, {"auto", "cublaslt", "rows", "mma"});
  models.read("warm_graphs", c.models.warm_graphs);
  read_device(top, c.device);
  top.read("threads", c.threads, IntRange{0, 4096});
  read_kv(top, c.kv);
  read_offload(top, c.offload);
  c.plugins = read_plugins(top, root, config_dir);
  read_slots(top, c.drafter, c.slots, c.plugins);
  read_scheduler(top, c.scheduler);
  read_server(top, root, c.server, config_dir);
  read_defaults(top, c.defaults);
  top.child("logging", {"level"}).read_choice("level", c.log_level,
                                              {"trace", "debug", "info", "warn", "error", "off"});
  // Last, so that a typo anywhere is reported before a model lookup that may list paths.
  resolve_model(models, "target", c.models.target, config_dir);
  if (c.drafter.type == DrafterKind::model) resolve_model(models, "draft", c.models.draft, config_dir);
  return c;
}

// Sees a document's events and keeps none of them: counting documents builds no nodes.
class IgnoreEvents final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Documents in `text`, counted up to `cap`. Not YAML::LoadAll: on some inputs (a lone
// ",", or ",K": found by fuzz/pipeline_yaml_fuzz.cpp) yaml-cpp 0.7's parser reports
// empty documents without end, and LoadAll keeps every one until memory runs out.
int count_documents(const std::string& text, int cap) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  IgnoreEvents events;
  int documents = 0;
  while (documents < cap && parser.HandleNextDocument(events)) ++documents;
  return documents;
}

PipelineConfig parse_text(std::string_view yaml, std::string_view source,
                          const std::optional<fs::path>& config_dir) {
  const std::string text(yaml);
  YAML::Node document;
  try {
    const int documents = count_documents(text, 2);
    if (documents > 1)
      fail(ErrorCode::invalid_argument, "{}: holds more than one YAML document, expected one", source);
    if (documents == 1) document = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    fail(ErrorCode::invalid_argument, "{}: line {}, column {}: malformed YAML: {}", source, e.mark.line + 1,
         e.mark.column + 1, e.msg);
  }
  return read_document(document, source, config_dir);
}

}  // namespace

PipelineConfig parse_pipeline_config(std::string_view yaml, std::string_view source) {
  return parse_text(yaml, source, std::nullopt);
}

PipelineConfig load_pipeline_config(const fs::path& file) {
  std::error_code ec;
  if (!fs::exists(file, ec)) fail(ErrorCode::not_found, "{}: no such pipeline config file", file.string());
  if (!fs::is_regular_file(file, ec))
    fail(ErrorCode::invalid_argument, "{}: not a regular file, expected a pipeline config", file.string());
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(ErrorCode::io, "{}: cannot open the pipeline config", file.string());
  // An empty file sets failbit on `text` (nothing was inserted): that is the empty config.
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail(ErrorCode::io, "{}: cannot read the pipeline config", file.string());
  return parse_text(text.str(), file.string(), fs::absolute(file).parent_path());
}

}  // namespace specpipe
