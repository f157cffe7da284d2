#include "model/cuda/graph_cache.h"

#include "model/cuda/device_memory.h"

namespace specpipe::cuda {

void GraphCache::launch(const std::vector<int32_t>& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    // A shape met for the first time runs eagerly: rounds of windows of mixed lengths
    // (n-gram proposals, SCV's per-sequence gamma) give most rounds a shape of their own,
    // and capturing each costs more than running it. A shape that recurs is captured.
    if (++sightings_[key] < kCaptureAt) {
      if (sightings_.size() > kMaxSightings) sightings_.clear();  // a bound, not a policy
      ++eager_runs_;
      enqueue();
      return;
    }
    sightings_.erase(key);
    cuda_try(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin graph capture");
    cudaGraph_t graph = nullptr;
    try {
      enqueue();
    } catch (...) {
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    cuda_try(cudaStreamEndCapture(stream, &graph), "end graph capture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t status = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    cuda_try(status, "graph instantiate");
    it = graphs_.emplace(key, exec).first;
  }
  cuda_try(cudaGraphLaunch(it->second, stream), "graph launch");
}

void GraphCache::clear() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  sightings_.clear();
}

}  // namespace specpipe::cuda
