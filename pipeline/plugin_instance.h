#pragma once
/// One plugin instance in one pipeline, and the host services it is given. Every hook
/// call goes through call(): a throwing hook or a status outside the documented range
/// counts as an error. After an error the instance is disabled for the pipeline and its
/// slot falls back to the built-in strategy; the fallback is logged once and counted.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/device.h"
#include "kvstore/kv_store.h"
#include "model/forward_model.h"
#include "pipeline/plugin_library.h"

namespace specpipe {

class PluginInstance {
 public:
  /// Creates the instance: `config` is the plugin's config block, `kv` the target KV store
  /// (write_slots target; may be null for slots that write no KV). `device_pool`: the
  /// target model's pool when it lives on a device (null on the CPU): the host services
  /// then allocate, copy and write there, on its stream. Throws Error (invalid_argument)
  /// naming the file and the plugin's message if create() refuses.
  PluginInstance(std::shared_ptr<const PluginLibrary> library, std::string slot, const specpipe_model_desc& model,
                 const nlohmann::json& config, KvStore* kv, std::shared_ptr<DeviceKvPool> device_pool = nullptr);
  ~PluginInstance();
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  const specpipe_plugin_table& table() const { return library_->table(); }
  void* handle() const { return instance_; }
  const std::string& name() const { return library_->name(); }
  const std::string& slot() const { return slot_; }
  const specpipe_model_desc& model() const { return model_; }
  /// The stream the hooks get: the device pool's (a cudaStream_t) or NULL on the CPU.
  specpipe_stream stream() const { return device_pool_ ? device_pool_->stream_handle() : nullptr; }

  /// Calls a hook: fn(error, error_size) -> status. Returns the status, or
  /// SPECPIPE_ERR_INTERNAL if the hook threw or answered outside [-4, 1]. The message of
  /// a failed call is in last_error().
  specpipe_status call(const char* hook, const std::function<specpipe_status(char*, size_t)>& fn);
  const std::string& last_error() const { return last_error_; }

  bool disabled() const { return disabled_; }
  /// Disables the instance (its slot falls back to the built-in strategy), counting the
  /// reason and logging the first time.
  /// `detail` replaces last_error() for failures the host detects itself (bad output).
  void disable(const std::string& reason, const std::string& detail = {});
  /// Counts a per-call fallback (a declined call) without disabling.
  void count_fallback(const std::string& reason) { ++fallbacks_[reason]; }
  const std::map<std::string, int64_t>& fallbacks() const { return fallbacks_; }

  /// The plugin's own counters (describe_metrics) plus the host's: fallbacks, disabled.
  nlohmann::json metrics() const;

  /// Rows the host wrote to the pool on the plugin's behalf (write_slots).
  int64_t pool_rows_written() const { return rows_written_; }

 private:
  static specpipe_status write_slots(void* host, int32_t layer, const DLTensor* k_rows, const DLTensor* v_rows,
                                     const int64_t* slots, int64_t n, specpipe_stream stream);
  static void* alloc_device(void* host, size_t bytes);
  static void free_device(void* host, void* ptr);
  static specpipe_status copy(void* host, void* dst, const void* src, size_t bytes, specpipe_stream stream);
  static void log(void* host, int32_t level, const char* message);

  std::shared_ptr<const PluginLibrary> library_;
  std::string slot_;
  KvStore* kv_;
  std::shared_ptr<DeviceKvPool> device_pool_;
  specpipe_host_api host_{};
  specpipe_model_desc model_{};
  void* instance_ = nullptr;
  bool disabled_ = false;
  std::string last_error_;
  std::map<std::string, int64_t> fallbacks_;
  int64_t rows_written_ = 0;
};

/// The model description a plugin is created with; `device` is where the pool lives.
specpipe_model_desc describe_model(const KvStore& kv, int32_t max_gamma, int32_t max_batch, Device device = {});

}  // namespace specpipe
