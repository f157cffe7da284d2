// SpecPV retrieval on the device (CudaTransformer's retrieval_*; DeviceRetrieval in
// kvstore/retrieval_index.h): each sequence's block summaries kept where the pool is,
// scored and ranked there (model/cuda/key_summaries.h); only the chosen blocks come back.
#include <algorithm>
#include <memory>
#include <mutex>

#include "core/dtype.h"
#include "core/error.h"
#include "model/cuda/cuda_transformer.h"
#include "model/cuda/key_summaries.h"
#include "model/cuda/transformer_state.h"

namespace specpipe {
namespace {

using cuda::cuda_try;

/// The DeviceRetrieval a RetrievalIndex drives: CudaTransformer's retrieval_* calls.
class CudaDeviceRetrieval final : public DeviceRetrieval {
 public:
  explicit CudaDeviceRetrieval(CudaTransformer* model) : model_(model) {}
  void summarise(SeqId seq, int32_t first, std::span<const int32_t> pool_blocks) override {
    model_->retrieval_summarise(seq, first, pool_blocks);
  }
  void upload(SeqId seq, int32_t first, int32_t n, const float* kmax, const float* kmin) override {
    model_->retrieval_upload(seq, first, n, kmax, kmin);
  }
  void select(SeqId seq, int32_t sums, int32_t blocks, int32_t k, int32_t first,
              std::vector<std::vector<int32_t>>& out) override {
    model_->retrieval_select(seq, sums, blocks, k, first, out);
  }
  void forget(SeqId seq) override { model_->retrieval_forget(seq); }

 private:
  CudaTransformer* model_;
};

}  // namespace

std::shared_ptr<DeviceRetrieval> CudaTransformer::device_retrieval() {
  return std::make_shared<CudaDeviceRetrieval>(this);
}

float* CudaTransformer::retrieval_room(SeqId seq, int32_t blocks) {
  cuda::TransformerState& d = *impl_;
  cuda::TransformerState::SeqSummaries& s = d.seq_summaries[seq];
  if (blocks > s.capacity) {
    const int64_t kvd = config_.kv_dim(), rows = 2 * int64_t{config_.num_layers};
    const int32_t capacity = std::max({blocks, 2 * s.capacity, 64});
    auto mem = std::make_unique<cuda::DeviceBuffer>();
    mem->allocate(static_cast<size_t>(rows * capacity * kvd) * sizeof(float), &device_bytes_);
    if (s.capacity > 0) {
      // Every layer's Kmax, then every layer's Kmin: 2 * layers rows of blocks.
      const size_t old_row = static_cast<size_t>(int64_t{s.capacity} * kvd) * sizeof(float);
      cuda_try(cudaMemcpy2DAsync(mem->as<float>(), static_cast<size_t>(int64_t{capacity} * kvd) * sizeof(float),
                                 s.mem->as<float>(), old_row, old_row, static_cast<size_t>(rows),
                                 cudaMemcpyDeviceToDevice, stream_),
               "summaries grown");
      cuda_try(cudaStreamSynchronize(stream_), "summaries grown");  // before the old memory goes
    }
    s.mem = std::move(mem);
    s.capacity = capacity;
  }
  return s.mem->as<float>();
}

void CudaTransformer::check_summary_blocks(std::span<const int32_t> blocks) const {
  const cuda::TransformerState& d = *impl_;
  if (d.kv_dtype != DType::f32)
    fail(ErrorCode::unsupported, "CUDA block summaries: the K/V store is {}, the summaries read FP32 keys",
         dtype_name(d.kv_dtype));
  for (int32_t b : blocks)
    if (b < 0 || b >= d.num_blocks)
      fail(ErrorCode::invalid_argument, "CUDA block summaries: block {} outside the pool of {}", b, d.num_blocks);
}

void CudaTransformer::retrieval_summarise(SeqId seq, int32_t first, std::span<const int32_t> pool_blocks) {
  cuda::TransformerState& d = *impl_;
  check_summary_blocks(pool_blocks);
  if (first < 0) fail(ErrorCode::invalid_argument, "CUDA block summaries: block index {}", first);
  if (pool_blocks.empty()) return;
  const auto n = static_cast<int32_t>(pool_blocks.size());
  const int64_t kvd = config_.kv_dim();
  const std::lock_guard stream_lock(d.stream_mutex);
  settle_launched_chain();
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  apply_block_copies(nullptr);  // copy-on-write of a block first
  float* kmax = retrieval_room(seq, first + n);
  const int64_t cap = d.seq_summaries[seq].capacity;
  const size_t ids_bytes = static_cast<size_t>(n) * sizeof(int32_t);
  if (ids_bytes > d.summaries.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.summaries.allocate(ids_bytes, &device_bytes_);
  }
  // From pageable memory: staged before the call returns.
  cuda_try(cudaMemcpyAsync(d.summaries.as<int32_t>(), pool_blocks.data(), ids_bytes, cudaMemcpyHostToDevice, stream_),
           "summary blocks upload");
  const int64_t layer = cap * kvd, kmin = int64_t{config_.num_layers} * layer;
  for (int32_t l = 0; l < config_.num_layers; ++l) {
    float* at = kmax + l * layer + int64_t{first} * kvd;
    cuda_try(cuda::key_block_summaries(d.pool_k[static_cast<size_t>(l)], kvd, d.block_size, static_cast<int32_t>(kvd),
                                       d.summaries.as<int32_t>(), n, at, at + kmin, stream_),
             "block summaries");
  }
}

void CudaTransformer::retrieval_upload(SeqId seq, int32_t first, int32_t n, const float* kmax, const float* kmin) {
  cuda::TransformerState& d = *impl_;
  if (first < 0 || n < 0) fail(ErrorCode::invalid_argument, "CUDA block summaries: blocks [{}, +{})", first, n);
  if (n == 0) return;
  const int64_t kvd = config_.kv_dim();
  const std::lock_guard stream_lock(d.stream_mutex);
  settle_launched_chain();
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  float* base = retrieval_room(seq, first + n);
  const int64_t cap = d.seq_summaries[seq].capacity;
  const size_t width = static_cast<size_t>(int64_t{n} * kvd) * sizeof(float);
  const size_t pitch = static_cast<size_t>(cap * kvd) * sizeof(float);
  const auto layers = static_cast<size_t>(config_.num_layers);
  float* at = base + int64_t{first} * kvd;
  cuda_try(cudaMemcpy2DAsync(at, pitch, kmax, width, width, layers, cudaMemcpyHostToDevice, stream_), "summaries upload");
  cuda_try(cudaMemcpy2DAsync(at + static_cast<int64_t>(layers) * cap * kvd, pitch, kmin, width, width, layers,
                             cudaMemcpyHostToDevice, stream_),
           "summaries upload");
}

void CudaTransformer::retrieval_select(SeqId seq, int32_t sums, int32_t blocks, int32_t k, int32_t first,
                                       std::vector<std::vector<int32_t>>& out) {
  cuda::TransformerState& d = *impl_;
  const int32_t L = config_.num_layers;
  const int64_t kvd = config_.kv_dim();
  out.assign(static_cast<size_t>(L), {});
  first = std::max(first, 0);
  const int32_t take = std::clamp(k, 0, std::max(0, blocks - first));
  if (take == 0) return;  // top_blocks' answer: none
  const std::lock_guard stream_lock(d.stream_mutex);
  auto it = d.seq_summaries.find(seq);
  if (it == d.seq_summaries.end() || it->second.capacity < blocks)
    fail(ErrorCode::invalid_argument, "CUDA retrieval: sequence {} has fewer than {} blocks summarised", seq, blocks);
  const int64_t sums_per_tap = 2 * int64_t{L} * kvd;
  if (sums < 0 || static_cast<size_t>((sums + 1) * sums_per_tap) * sizeof(double) > d.query_sums.bytes())
    fail(ErrorCode::invalid_argument, "CUDA retrieval: no query sums {} from the last tapped forward", sums);
  settle_launched_chain();
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  const size_t score_bytes = cuda::align_up(static_cast<size_t>(int64_t{L} * blocks) * sizeof(float), 256);
  const size_t top_bytes = static_cast<size_t>(int64_t{L} * take) * sizeof(int32_t);
  if (score_bytes + top_bytes > d.retrieval_scratch.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    d.retrieval_scratch.allocate(score_bytes + top_bytes, &device_bytes_);
  }
  if (top_bytes > d.retrieval_top.bytes()) d.retrieval_top.allocate(top_bytes);  // the last select synced
  auto* scores = d.retrieval_scratch.as<float>();
  auto* top = reinterpret_cast<int32_t*>(d.retrieval_scratch.as<unsigned char>() + score_bytes);
  const float* kmax = it->second.mem->as<float>();
  const int64_t layer = int64_t{it->second.capacity} * kvd;
  const double* pos = d.query_sums.as<double>() + sums * sums_per_tap;
  cuda_try(cuda::quest_block_scores(kmax, kmax + L * layer, layer, blocks, static_cast<int32_t>(kvd), L, pos,
                                    pos + L * kvd, scores, stream_),
           "quest scores");
  cuda_try(cuda::quest_top_blocks(scores, blocks, first, blocks, take, L, top, stream_), "top blocks");
  cuda_try(cudaMemcpyAsync(d.retrieval_top.as<int32_t>(), top, top_bytes, cudaMemcpyDeviceToHost, stream_),
           "top blocks to the host");
  cuda_try(cudaStreamSynchronize(stream_), "retrieval");
  const int32_t* host = d.retrieval_top.as<int32_t>();
  for (int32_t l = 0; l < L; ++l) out[static_cast<size_t>(l)].assign(host + int64_t{l} * take, host + int64_t{l + 1} * take);
}

void CudaTransformer::retrieval_forget(SeqId seq) {
  cuda::TransformerState& d = *impl_;
  const std::lock_guard stream_lock(d.stream_mutex);
  auto it = d.seq_summaries.find(seq);
  if (it == d.seq_summaries.end()) return;
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  cuda_try(cudaStreamSynchronize(stream_), "sync");  // no queued summary writes into it
  d.seq_summaries.erase(it);
}

}  // namespace specpipe
