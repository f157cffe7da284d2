#include "model/cuda/cuda_forward_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "core/error.h"
#include "model/cuda/pinned_host_allocator.h"

namespace specpipe {
namespace {

void cuda_try(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail(ErrorCode::internal, "CUDA: {}: {}", what, cudaGetErrorString(status));
}

/// A recorded point of a CUDA stream's work.
class CudaEvent final : public EventImpl {
 public:
  explicit CudaEvent(const Stream& stream) {
    cuda_try(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate");
    const cudaError_t status = cudaEventRecord(event_, static_cast<cudaStream_t>(stream.native));
    if (status != cudaSuccess) {
      cudaEventDestroy(event_);
      cuda_try(status, "cudaEventRecord");
    }
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void wait_on(const Stream& waiter) const override {
    // A host consumer (CPU stream) reads as soon as this returns: block until done. A
    // CUDA consumer waits on the device and the host goes on.
    if (waiter.device.kind == DeviceKind::cuda)
      cuda_try(cudaStreamWaitEvent(static_cast<cudaStream_t>(waiter.native), event_, 0), "cudaStreamWaitEvent");
    else
      synchronize();
  }
  void synchronize() const override { cuda_try(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  bool query() const override {
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    cuda_try(status, "cudaEventQuery");
    return true;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

Event record_cuda_event(const Stream& stream) { return Event(std::make_shared<const CudaEvent>(stream)); }

}  // namespace

void register_cuda_events() {
  static std::once_flag once;
  std::call_once(once, [] { register_event_recorder(DeviceKind::cuda, &record_cuda_event); });
}

int32_t CudaForwardModel::current_device() {
  int device = 0;
  cuda_try(cudaGetDevice(&device), "cudaGetDevice");  // the constructor of model_ set it
  return device;
}

DeviceMemory device_memory(int32_t device) {
  cuda_try(cudaSetDevice(device), "cudaSetDevice");
  DeviceMemory m;
  cuda_try(cudaMemGetInfo(&m.free, &m.total), "cudaMemGetInfo");
  return m;
}

CudaForwardModel::CudaForwardModel(std::unique_ptr<CudaTransformer> model)
    : model_(std::move(model)), device_{DeviceKind::cuda, current_device()}, pool_(*model_, device_) {
  register_cuda_events();
}

KvStoreConfig CudaForwardModel::kv_config(int32_t num_blocks, int32_t block_size) const {
  if (model_->kv_blocks() > 0 && (num_blocks != model_->kv_blocks() || block_size != model_->kv_config().block_size))
    fail(ErrorCode::invalid_argument, "CUDA model: a store of {} blocks of {} does not match its pool of {} of {}",
         num_blocks, block_size, model_->kv_blocks(), model_->kv_config().block_size);
  return kv_store_layout(config(), num_blocks, block_size, /*device_pool=*/true);
}

void CudaForwardModel::allocate_kv_pool(int32_t num_blocks, int32_t block_size) {
  model_->allocate_kv_pool(num_blocks, block_size);
}

BlockCopier CudaForwardModel::block_copier() {
  CudaTransformer* model = model_.get();  // the store is built and dropped with the pipeline that owns this model
  return [model](int32_t src, int32_t dst) { model->queue_block_copy(src, dst); };
}

KeySummariser CudaForwardModel::key_summariser() {
  CudaTransformer* model = model_.get();  // as block_copier's
  return [model](std::span<const int32_t> blocks, float* kmax, float* kmin) {
    model->summarise_key_blocks(blocks, kmax, kmin);
  };
}

std::shared_ptr<DeviceRetrieval> CudaForwardModel::device_retrieval() {
  return model_->device_retrieval();  // as block_copier's: the pipeline that owns this model drops it first
}

HostTierCopier CudaForwardModel::host_tier_copier() {
  CudaTransformer* model = model_.get();  // as block_copier's
  return {[model](int32_t pool_block, int32_t host_block) { model->queue_host_copy(true, pool_block, host_block); },
          [model](int32_t host_block, int32_t pool_block) { model->queue_host_copy(false, pool_block, host_block); },
          [model](int32_t layer, int32_t host_block, int32_t pool_block) {
            model->queue_host_layer_copy(layer, host_block, pool_block);
          }};
}

bool CudaForwardModel::land_host_copies(const KvStore& kv) {
  model_->land_host_copies(kv.host_tier());
  return true;
}

HostMemoryAllocator* CudaForwardModel::host_memory_allocator() { return &cuda::pinned_host_allocator(); }

void CudaForwardModel::forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink,
                               Logits& out) {
  // Greedy-only forwards bring back each row's argmax alone (computed on the device);
  // so do sampled windows judged on the device (only their verdicts come back).
  const bool verdicts = computes_sampled_verdicts();
  bool ids_only = true;
  for (const ForwardWindow& w : windows) ids_only = ids_only && (w.ids_only || (verdicts && w.verdict != nullptr));
  model_->set_copy_logits(!ids_only);
  // A staging sink (NWOR) takes the round's rows instead of the pool.
  const bool staged = sink.stages_rows();
  model_->set_stage_rows(staged);
  model_->forward(windows, kv, logits_);  // checks the windows (window_starts)
  rows_.clear();
  for (size_t w = 0; w < windows.size(); ++w) rows_.push_back(logits_.rows(w));
  copy_logits(ids_only, out);
  const std::vector<SampledVerdict>& judged = logits_.verdicts();
  for (size_t w = 0; w < judged.size(); ++w)
    if (judged[w].next_token >= 0) out.set_verdict(w, judged[w]);
  // The rows are in the device pool already (the sink counts them) or staged.
  std::vector<int32_t> starts, counts;
  for (const ForwardWindow& w : windows) {
    starts.push_back(w.start < 0 ? kv.length(w.seq) : w.start);
    counts.push_back(static_cast<int32_t>(w.tokens.size()));
  }
  report_rows(windows, starts, counts, sink, staged);
}

void CudaForwardModel::copy_logits(bool ids_only, Logits& out) const {
  if (ids_only) {
    const std::span<int32_t> ids = out.prepare_ids(config().vocab_size, rows_);
    size_t at = 0;
    for (size_t w = 0; w < rows_.size(); ++w)
      for (int32_t i = 0; i < rows_[w]; ++i) ids[at++] = logits_.argmax(w, i);
    return;
  }
  const std::span<float> dst = out.prepare(config().vocab_size, rows_);
  size_t at = 0;
  for (size_t w = 0; w < rows_.size(); ++w)
    for (int32_t i = 0; i < rows_[w]; ++i) {
      const std::span<const float> row = logits_.row(w, i);
      std::memcpy(dst.data() + at, row.data(), row.size_bytes());
      at += row.size();
    }
}

void CudaForwardModel::prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv,
                                         Logits& out) {
  model_->set_copy_logits(true);
  try {
    model_->prefill_layerwise(seq, prompt, kv, logits_, copy_overlap_);
  } catch (...) {
    try {
      model_->release_layer_prefill();
    } catch (...) {  // the prefill's own error is the one to report
    }
    throw;
  }
  model_->release_layer_prefill();
  rows_.assign(1, 1);
  copy_logits(false, out);
}

void CudaForwardModel::forward_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                            const KvStore& kv, KvWriteSink& sink, std::vector<int32_t>& ids) {
  if (steps > CudaTransformer::kMaxChainSteps) {
    ForwardModel::forward_greedy_chain(windows, steps, kv, sink, ids);
    return;
  }
  model_->forward_greedy_chain(windows, steps, kv, ids);  // checks the windows and reservations
  report_chain_rows(windows, steps, kv, sink);
}

void CudaForwardModel::forward_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                             const ChainSampling& sampling, const KvStore& kv, KvWriteSink& sink,
                                             std::vector<int32_t>& ids, std::vector<float>& q) {
  chain_q_on_device_ = false;
  chain_q_ready_ = {};  // the chain ends with its sync: the rows are complete
  if (steps > CudaTransformer::kMaxChainSteps) {
    ForwardModel::forward_sampled_chain(windows, steps, sampling, kv, sink, ids, q);
    return;
  }
  model_->forward_sampled_chain(windows, steps, sampling, kv, ids, q);  // checks the windows and reservations
  chain_q_on_device_ = sampling.q_on_device;
  report_chain_rows(windows, steps, kv, sink);
}

Event CudaForwardModel::launch_sampled_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                             const ChainSampling& sampling, const KvStore& kv, KvWriteSink& sink,
                                             DeviceIds& ids) {
  chain_q_on_device_ = false;
  chain_q_ready_ = {};
  if (steps > CudaTransformer::kMaxChainSteps)
    fail(ErrorCode::invalid_argument, "CUDA model: a launched sampled chain of {} steps (at most {})", steps,
         CudaTransformer::kMaxChainSteps);
  launched_on_host_ = false;
  Event done = model_->launch_sampled_chain(windows, steps, sampling, kv);  // checks the windows and reservations
  report_chain_rows(windows, steps, kv, sink);
  ids = model_->early_ids();
  chain_q_on_device_ = true;
  chain_q_ready_ = done;
  return done;
}

DeviceRows CudaForwardModel::sampled_chain_q() const {
  if (!chain_q_on_device_) return {};
  return {model_->chain_q_device(), model_->config().vocab_size, device_, chain_q_ready_};
}

void CudaForwardModel::read_device_rows(const DeviceRows& rows, int32_t count, int32_t cols, float* out) const {
  rows.ready.wait_on(stream());
  cuda_try(cudaMemcpy2DAsync(out, static_cast<size_t>(cols) * sizeof(float), rows.data,
                             static_cast<size_t>(rows.stride) * sizeof(float), static_cast<size_t>(cols) * sizeof(float),
                             static_cast<size_t>(count), cudaMemcpyDeviceToHost, model_->stream()),
           "device rows copy");
  cuda_try(cudaStreamSynchronize(model_->stream()), "device rows copy");
}

Event CudaForwardModel::launch_greedy_chain(std::span<const ForwardWindow> windows, int32_t steps,
                                            const KvStore& kv, KvWriteSink& sink) {
  launched_on_host_ = steps > CudaTransformer::kMaxChainSteps;
  if (launched_on_host_) return ForwardModel::launch_greedy_chain(windows, steps, kv, sink);
  Event done = model_->launch_greedy_chain(windows, steps, kv);  // checks the windows and reservations
  report_chain_rows(windows, steps, kv, sink);
  return done;
}

Event CudaForwardModel::launch_greedy_chain_early(std::span<const ForwardWindow> windows, int32_t steps,
                                                  int32_t early, const KvStore& kv, KvWriteSink& sink,
                                                  DeviceIds& early_ids, int32_t slot) {
  launched_on_host_ = steps > CudaTransformer::kMaxChainSteps;
  if (launched_on_host_)
    return ForwardModel::launch_greedy_chain_early(windows, steps, early, kv, sink, early_ids, slot);
  if (early < 1) fail(ErrorCode::invalid_argument, "CUDA model: the ids of {} early steps of a chain", early);
  Event done = model_->launch_greedy_chain(windows, steps, kv, early, slot);  // checks the windows and reservations
  report_chain_rows(windows, steps, kv, sink);
  early_ids = model_->early_ids();
  return done;
}

void CudaForwardModel::collect_greedy_chain(std::vector<int32_t>& ids) {
  if (launched_on_host_) {
    launched_on_host_ = false;
    ForwardModel::collect_greedy_chain(ids);
    return;
  }
  model_->collect_greedy_chain(ids);
}

void CudaForwardModel::report_chain_rows(std::span<const ForwardWindow> windows, int32_t steps, const KvStore& kv,
                                         KvWriteSink& sink) {
  // Step 0 wrote each window's tokens, step s >= 1 one token after them.
  std::vector<int32_t> starts, counts;
  for (const ForwardWindow& w : windows) {
    starts.push_back(w.start < 0 ? kv.length(w.seq) : w.start);
    counts.push_back(static_cast<int32_t>(w.tokens.size()));
  }
  report_rows(windows, starts, counts, sink);
  for (int32_t s = 1; s < steps; ++s) {
    for (size_t w = 0; w < windows.size(); ++w) {
      starts[w] += counts[w];
      counts[w] = 1;
    }
    report_rows(windows, starts, counts, sink);
  }
}

void CudaForwardModel::report_rows(std::span<const ForwardWindow> windows, std::span<const int32_t> starts,
                                   std::span<const int32_t> counts, KvWriteSink& sink, bool staged) {
  written_.clear();
  for (size_t w = 0; w < windows.size(); ++w) written_.push_back({windows[w].seq, starts[w], counts[w], nullptr, nullptr, 0});
  const int64_t kvd = config().kv_dim();
  for (int32_t layer = 0; layer < config().num_layers; ++layer) {
    if (staged) {
      // Window after window in the staging buffer: [rows, kv_dim], dense.
      int64_t row = 0;
      for (WindowKvRows& w : written_) {
        w.k = model_->staged_k(layer) + row * kvd;
        w.v = model_->staged_v(layer) + row * kvd;
        w.ld = kvd;
        w.on_device = true;
        row += w.n;
      }
    }
    sink.write_layer(layer, written_);
  }
}

}  // namespace specpipe
