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

  /// Launches the graph of `key` on `stream`; when there is none yet, first captures what
  /// `enqueue` puts on the stream (thread-local capture mode) into one. Throws Error
  /// (internal) on a CUDA failure; a failed capture leaves nothing behind.
  void launch(const std::vector<int32_t>& key, cudaStream_t stream, const std::function<void()>& enqueue);
  /// Graphs captured so far.
  size_t size() const { return graphs_.size(); }
  /// Drops every graph (they hold the addresses of buffers about to be reallocated).
  void clear();

 private:
  std::map<std::vector<int32_t>, cudaGraphExec_t> graphs_;
};

}  // namespace specpipe::cuda
