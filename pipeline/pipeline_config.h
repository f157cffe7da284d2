#pragma once
/// The typed description of a pipeline, parsed once from a YAML file (docs/CONFIG.md);
/// nothing downstream reads raw YAML. Every field has the default an empty file gets:
/// the embedded demo pair on the CPU.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/ngram_drafter.h"

namespace specpipe {

/// What fills the `drafter` slot.
enum class DrafterKind { model, ngram, none };
DrafterKind parse_drafter_kind(const std::string& text);  ///< "model", "ngram", "none"
const char* to_string(DrafterKind kind);

/// slots.drafter.draft_ahead: automatic ("auto") is on with a device and off on the CPU,
/// where the two models would share the same cores.
enum class DraftAhead { automatic, on, off };
DraftAhead parse_draft_ahead(const std::string& text);  ///< "auto", "on", "off"
const char* to_string(DraftAhead mode);

struct ModelsConfig {
  std::string target = "demo-target";  ///< directory, or a name under models/ ($SPECPIPE_MODELS)
  std::string draft = "demo-draft";    ///< used when the drafter is `model`
  /// On a device: the draft model's forwards of at most 16 tokens (decode and chain steps)
  /// run as one persistent kernel (model/cuda/fused_step.h). Off by default: since the
  /// per-kernel forward streams its weights with the mma GEMM and launches dependents
  /// early, it drafts faster beside a verifying target (docs/BENCHMARKS.md section 5), and
  /// one path for every draft forward keeps the draft batch invariant. Ignored on the CPU.
  bool draft_fused_step = false;
  /// The fused kernel's grid: 0 = automatic (one block per SM, half the SMs when the
  /// drafter drafts ahead: the rest are the target's).
  int32_t draft_fused_blocks = 0;
  /// On a device: the projections' GEMM, "auto", "cublaslt", "rows" or "mma"
  /// (model/cuda/cuda_gemm.h). auto: the tensor-core weight-streaming
  /// kernel (mma) for models without the fused step, cuBLASLt for the fused draft's longer
  /// forwards. Ignored on the CPU.
  std::string gemm = "auto";
  /// On a device: before the server answers, run the shapes one sequence's rounds use at
  /// every gamma 0..slots.drafter.max_gamma (the target's verify windows, the draft
  /// model's chains) so their CUDA graphs are captured at start, not in the first
  /// requests (pipeline/warm_start.h). Ignored on the CPU.
  bool warm_graphs = true;
};

struct KvConfig {
  static constexpr int64_t kAuto = 0;  ///< `tokens: auto`
  /// Target KV capacity in tokens (the draft model's is as large); kAuto (devices only):
  /// memory_fraction of the device memory the weights left free.
  int64_t tokens = 16384;
  int32_t block_size = 16;  ///< tokens per block
  bool prefix_cache = true; ///< on a device the target model copies shared blocks (copy-on-write)
  float memory_fraction = 0.9f;
  /// Element type of the K/V store: "fp32", or "bf16" (CUDA devices: half the bytes, so
  /// twice the context in the same pool, host tier and PCIe traffic; each element rounded
  /// once when written, attention still accumulates in FP32; the CPU backend refuses it).
  std::string dtype = "fp32";
};

/// The host KV tier and layer ring (kvstore/README.md, "Host tier"): when the target's
/// pool fills, the oldest full committed blocks of the longest sequences move to host
/// memory, and every forward streams them back layer by layer. CPU and CUDA (pinned host
/// memory and a copy stream there).
struct OffloadConfig {
  bool enable = false;
  int64_t host_bytes = int64_t{4} << 30;  ///< host tier size (K and V, every layer)
  int32_t ring_slots = 2;                 ///< layer slots of the ring (>= 2)
  /// The ring's copies overlap the forward (a copy thread); false: they run on the
  /// forward's thread, the synchronous way, for comparison.
  bool overlap = true;
  std::string policy = "longest";         ///< which blocks move first (kvstore/offload_policy.h)
  /// How a prompt longer than the pool can hold is prefilled: `layerwise` (its first
  /// blocks booked on the host tier, the whole prompt one layer at a time, each K/V byte
  /// crossing once; pipeline/prefill.h) or `chunked` (chunk by chunk, older blocks moved
  /// out in between and streamed back for every later chunk).
  std::string prefill = "layerwise";
};

struct DrafterConfig {
  DrafterKind type = DrafterKind::model;
  int32_t gamma = 4;       ///< drafts per round (requests may ask for another, up to max_gamma)
  int32_t max_gamma = 16;
  NgramConfig ngram;       ///< for type ngram (max_proposals follows gamma)
  /// Type model: draft the next round while the target verifies this one
  /// (pipeline/model_drafter.h).
  DraftAhead draft_ahead = DraftAhead::automatic;
};

struct SchedulerSection {
  int32_t max_batch = 32;      ///< sequences per round
  int32_t max_queue = 1024;    ///< waiting requests before new ones are refused ("overloaded")
  int32_t prefill_chunk = 256; ///< prompt tokens per sequence per prefill forward
  int32_t actor_threads = 1;   ///< CAF scheduler threads
  /// Rounds in flight at once: the running sequences split into this many micro-batches,
  /// each a round of its own, so one drafts while another verifies (1: one round at a time).
  int32_t micro_batches = 1;
};

/// CURVE authentication of the ZeroMQ endpoint (docs/PROTOCOL.md, "Security"). Each
/// value is a Z85 key (40 characters) or the path of a key file `specpipe keygen` wrote
/// (relative paths resolved against the config file's directory when read from YAML).
/// True when `value` is written as a key (40 characters of the Z85 alphabet) rather than
/// as a key file's path.
inline bool is_inline_curve_key(std::string_view value) {
  constexpr std::string_view kZ85 =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  return value.size() == 40 && value.find_first_not_of(kZ85) == std::string_view::npos;
}

struct CurveConfig {
  std::string secret_key;                    ///< the server's secret key; empty = CURVE off
  std::vector<std::string> allowed_clients;  ///< public keys admitted (at least one with CURVE)
  bool enabled() const { return !secret_key.empty(); }
};

struct ServerConfig {
  std::string endpoint = "tcp://127.0.0.1:5555";  ///< ZeroMQ ROUTER bind address
  int64_t max_message_bytes = 1 << 20;  ///< larger requests get a too_large error
  int32_t max_inflight = 256;           ///< requests in the pipeline before "overloaded"
  /// Generate requests one client may have in flight before "client_limit": a client is
  /// its CURVE public key (all its connections), else its connection.
  int32_t max_inflight_per_client = 64;
  CurveConfig curve;
  /// Serve a non-loopback address without authentication (ZeroMQ without CURVE, or the
  /// HTTP gateway); otherwise such a bind is refused.
  bool allow_insecure = false;
  int32_t shutdown_grace_ms = 5000;     ///< SIGINT/SIGTERM: time in-flight requests get to finish
  /// ZeroMQ: a connection that answers none of the server's heartbeats (sent every fifth
  /// of this) for this long is dropped and its requests cancelled.
  int32_t heartbeat_timeout_ms = 5000;
  /// The OpenAI-style HTTP gateway's bind address, "HOST:PORT" (port 0 picks a free one);
  /// empty: no gateway (docs/HTTP.md).
  std::string http;
  /// HTTP: time a client has to send a request's head and body, and to take each write.
  int32_t http_timeout_ms = 10000;
};

/// A plugin library the pipeline loads (docs/PLUGIN_SDK.md).
struct PluginConfig {
  std::string name;                ///< how slots refer to it (plugins.<name>)
  std::string path;                ///< the library: a file, or a name found by resolve_plugin_path
  std::string config_json = "{}";  ///< its config block, as a JSON object
};

/// Which strategy fills the slots besides the drafter: a built-in one, or a plugin
/// declared under `plugins`.
struct SlotStrategies {
  std::string kv_write = "direct";    ///< "direct" or a plugin name
  std::string verify_plan = "fixed";  ///< "fixed" or a plugin name
  std::string verify_view = "full";   ///< "full" or a plugin name (SpecPV)
};

/// Request parameters a client leaves out.
struct RequestDefaults {
  int32_t max_tokens = 64;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  bool stop_at_eos = true;
};

struct PipelineConfig {
  int32_t version = 1;
  ModelsConfig models;
  std::string device = "cpu";  ///< "cpu" (CUDA: "cuda:N", where built)
  int32_t threads = 0;         ///< CPU kernel threads, 0 = $SPECPIPE_THREADS or all cores
  KvConfig kv;
  OffloadConfig offload;
  DrafterConfig drafter;       ///< slots.drafter
  SlotStrategies slots;        ///< slots.kv_write, slots.verify_plan
  std::vector<PluginConfig> plugins;
  SchedulerSection scheduler;
  ServerConfig server;
  RequestDefaults defaults;
  std::string log_level = "warn";
};

/// Parses a pipeline YAML file. Throws specpipe::Error whose message starts with the file
/// and the key path, e.g. "pipeline.yaml: slots.drafter.gamma: 40 is out of range
/// [0, 16] (max_gamma)": not_found (missing file), invalid_argument (malformed YAML,
/// unknown key, wrong type, out of range, model directory or plugin file that does not
/// exist, a slot naming an undeclared plugin).
PipelineConfig load_pipeline_config(const std::filesystem::path& file);
/// The same from text; `source` names it in messages.
PipelineConfig parse_pipeline_config(std::string_view yaml, std::string_view source);

}  // namespace specpipe
