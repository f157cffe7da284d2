#pragma once
/// The `kv_write` slot filled by a plugin (e.g. NWOR): during a verify round the window's
/// K/V go to the plugin, which stages them and writes only accepted rows at commit. Any
/// plugin failure degrades to the built-in direct path: a declined round is written
/// directly; a failure mid-round makes commit_round() report that the accepted rows are
/// not in the pool, so the caller recomputes them (the pool never holds a half-committed
/// token, since lengths only advance after a successful commit).
///
/// On a device the rows of a staged round are device rows the model kept out of its
/// pool (stages_rows()); the plugin copies them and writes the accepted ones through the
/// host services, which then work on the device pool (pipeline/plugin_instance.h).
#include <memory>
#include <vector>

#include "kvstore/kv_write_sink.h"
#include "pipeline/plugin_instance.h"

namespace specpipe {

class PluginKvWriter final : public KvWriteSink {
 public:
  PluginKvWriter(KvStore& store, std::shared_ptr<PluginInstance> plugin);

  void begin_round(std::span<const WindowPlacement> windows) override;
  bool stages_rows() const override { return mode_ == Mode::staged; }
  void write_layer(int32_t layer, std::span<const WindowKvRows> windows) override;
  bool commit_round(std::span<const WindowCommit> verdicts) override;
  void abort_round() override;
  KvWriteStats stats() const override;

  const PluginInstance& plugin() const { return *plugin_; }

 private:
  enum class Mode { idle, direct, staged, broken };
  specpipe_status stage(int32_t layer, std::span<const WindowKvRows> windows);

  KvStore& store_;
  std::shared_ptr<PluginInstance> plugin_;
  DirectKvWriter direct_;
  Mode mode_ = Mode::idle;
  std::vector<WindowPlacement> round_;
  std::vector<int64_t> slots_;  // every window's slots, concatenated
  std::vector<float> gather_k_, gather_v_;
  KvWriteStats stats_;
};

}  // namespace specpipe
