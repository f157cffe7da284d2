#pragma once
/// CUDA graphs of a model's forwards, one per shape (CudaTransformerOptions::graphs):
/// the first forward of a shape is captured, every forward of it replays the graph.
/// model/cuda/ internal; the key is forward_plan.h's graph_key.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

namespace specpipe::cuda {

class GraphCache {
 public:
  GraphCache() = default;
  ~GraphCache() { clear(); }
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  /// Launches the graph of `key` on `stream`; when there is none yet, runs `enqueue`
  /// eagerly the first kCaptureAt - 1 times the key is met, then captures what it puts on
  /// the stream (thread-local capture mode) into one. `enqueue` must therefore be valid
  /// both eagerly and under capture. Throws Error (internal) on a CUDA failure; a failed
  /// capture leaves nothing behind.
  void launch(const std::vector<int32_t>& key, cudaStream_t stream, const std::function<void()>& enqueue);
  /// Graphs captured so far.
  size_t size() const { return graphs_.size(); }
  /// Forwards run eagerly because their shape had not recurred yet.
  int64_t eager_runs() const { return eager_runs_; }
  /// The sighting that captures a shape (2: the first time it recurs).
  static constexpr int32_t kCaptureAt = 2;
  /// Drops every graph (they hold the addresses of buffers about to be reallocated).
  void clear();

 private:
  std::map<std::vector<int32_t>, cudaGraphExec_t> graphs_;
  std::map<std::vector<int32_t>, int32_t> sightings_;  ///< shapes met, not captured yet
  static constexpr size_t kMaxSightings = 1 << 14;
  int64_t eager_runs_ = 0;
};

}  // namespace specpipe::cuda
