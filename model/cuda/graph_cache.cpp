#include "model/cuda/graph_cache.h"

#include "model/cuda/device_memory.h"

namespace specpipe::cuda {

void GraphCache::launch(const std::vector<int32_t>& key, cudaStream_t stream, const std::function<void()>& enqueue) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
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
}

}  // namespace specpipe::cuda
