// CudaTransformer's sampled verdicts (ARCHITECTURE.md section 3, step 4): a sampled
// verify window judged on the device where its logits rows are. enqueue_verdicts queues
// rejection sampling behind the forward's steps, read_verdicts reads the answers after
// the forward's one sync. The forward itself is in cuda_transformer.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/sampling.h"
#include "model/cuda/cuda_transformer.h"
#include "model/cuda/device_memory.h"
#include "model/cuda/forward_plan.h"
#include "model/cuda/transformer_state.h"

namespace specpipe {

int32_t CudaTransformer::enqueue_verdicts(std::span<const ForwardWindow> windows, const cuda::ForwardPlan& plan) {
  cuda::TransformerState& d = *impl_;
  const auto V = static_cast<size_t>(config_.vocab_size);
  size_t n = 0, drafts = 0, q_rows = 0;
  for (size_t w = 0; w < windows.size(); ++w) {
    const SampledVerdictRequest* r = windows[w].verdict;
    if (!r) continue;
    const auto k = static_cast<int32_t>(r->drafts.size());
    if (r->u.size() != r->drafts.size() + 1 || !(r->temperature > 0.0f) || r->first_row < 0 ||
        r->first_row + k >= plan.window_logit_rows[w] || (r->drafts_placed && k > plan.attention.windows[w].n))
      fail(ErrorCode::invalid_argument,
           "CUDA forward: a sampled verdict of {} drafts from row {} with {} uniforms over {} logits rows", k,
           r->first_row, r->u.size(), plan.window_logit_rows[w]);
    ++n;
    drafts += r->drafts.size();
    if (r->q || r->q_device.data) q_rows += r->drafts.size();
  }
  if (n == 0) return 0;
  // The fused step writes the logits rows only when they are copied back.
  if (d.fused_blocks > 0) fail(ErrorCode::internal, "CUDA forward: sampled verdicts with the fused step");
  const size_t ids_at = cuda::align_up(n * sizeof(cuda::RejectionWindow), 256);
  const size_t u_at = cuda::align_up(ids_at + drafts * sizeof(int32_t), 256);
  const size_t q_at = cuda::align_up(u_at + (drafts + n) * sizeof(double), 256);
  const size_t out_at = cuda::align_up(q_at + q_rows * V * sizeof(float), 256);
  const size_t bytes = out_at + 2 * n * sizeof(int32_t);
  if (bytes > d.verdict_dev.bytes()) {
    // Every forward that used them ended with a sync; nothing captures them.
    const size_t grown = std::max(bytes, 2 * d.verdict_dev.bytes());
    d.verdict_dev.allocate(grown, &device_bytes_);
    d.verdict_host.allocate(grown);
  }
  unsigned char* host = d.verdict_host.as<unsigned char>();
  unsigned char* dev = d.verdict_dev.as<unsigned char>();
  auto* desc = reinterpret_cast<cuda::RejectionWindow*>(host);
  auto* ids = reinterpret_cast<int32_t*>(host + ids_at);
  auto* u = reinterpret_cast<double*>(host + u_at);
  auto* q = reinterpret_cast<float*>(host + q_at);
  std::vector<float> temperature;
  int32_t draft_at = 0, u_off = 0, q_row = 0;
  bool host_q = false;  // some q rows come from the host: the upload takes the q region too
  for (size_t w = 0; w < windows.size(); ++w) {
    const SampledVerdictRequest* r = windows[w].verdict;
    if (!r) continue;
    const auto k = static_cast<int32_t>(r->drafts.size());
    const bool has_q = r->q || r->q_device.data;
    *desc++ = {static_cast<int32_t>(plan.first_logit_row[w]) + r->first_row, has_q ? q_row : -1, k, draft_at, u_off};
    std::copy(r->drafts.begin(), r->drafts.end(), ids + draft_at);
    std::copy(r->u.begin(), r->u.end(), u + u_off);
    if (r->q) {
      std::copy(r->q, r->q + static_cast<size_t>(k) * V, q + static_cast<size_t>(q_row) * V);
      host_q = true;
    }
    if (has_q) q_row += k;
    draft_at += k;
    u_off += k + 1;
    temperature.push_back(r->temperature);
  }
  cuda::cuda_try(cudaMemcpyAsync(dev, host, host_q ? out_at : q_at, cudaMemcpyHostToDevice, stream_),
                 "verdict inputs upload");
  // Drafts placed on the device (SampledVerdictRequest::drafts_placed: the draft model's
  // sampled chain left them there): the host staged placeholders; their ids are the
  // window's last tokens, which the forward's input ids hold since resolve_placed_ids
  // (queued before the forward, on this stream).
  draft_at = 0;
  q_row = 0;
  const auto* tokens = reinterpret_cast<const int32_t*>(d.meta.as<unsigned char>() + d.meta_layout.tokens);
  for (size_t w = 0; w < windows.size(); ++w) {
    const SampledVerdictRequest* r = windows[w].verdict;
    if (!r) continue;
    const size_t k = r->drafts.size();
    if (r->drafts_placed && k > 0) {
      const cuda::AttentionWindowDesc& a = plan.attention.windows[w];
      cuda::cuda_try(cudaMemcpyAsync(dev + ids_at + static_cast<size_t>(draft_at) * sizeof(int32_t),
                                     tokens + a.first_token + a.n - static_cast<int32_t>(k), k * sizeof(int32_t),
                                     cudaMemcpyDeviceToDevice, stream_),
                     "verdict draft ids copy");
    }
    draft_at += static_cast<int32_t>(k);
    // q rows the draft model left on this device (ModelDrafter::keep_q_on_device): copied
    // into their slots here, behind their event, never through the host.
    if (!(r->q || r->q_device.data)) continue;
    if (!r->q && k > 0) {
      r->q_device.ready.wait_on(Stream{r->q_device.device, stream_});
      cuda::cuda_try(cudaMemcpy2DAsync(dev + q_at + static_cast<size_t>(q_row) * V * sizeof(float), V * sizeof(float),
                                       r->q_device.data, static_cast<size_t>(r->q_device.stride) * sizeof(float),
                                       V * sizeof(float), k, cudaMemcpyDeviceToDevice, stream_),
                     "verdict q rows copy");
    }
    q_row += static_cast<int32_t>(k);
  }
  auto* acc = reinterpret_cast<int32_t*>(dev + out_at);
  const auto count = static_cast<int32_t>(n);
  for (int32_t a = 0; a < count;) {  // a launch per run of one temperature
    int32_t b = a + 1;
    while (b < count && temperature[static_cast<size_t>(b)] == temperature[static_cast<size_t>(a)]) ++b;
    cuda::cuda_try(cuda::rejection_sample(d.logits, static_cast<int64_t>(V), reinterpret_cast<const float*>(dev + q_at),
                                    static_cast<int64_t>(V), reinterpret_cast<const int32_t*>(dev + ids_at),
                                    reinterpret_cast<const double*>(dev + u_at),
                                    reinterpret_cast<const cuda::RejectionWindow*>(dev) + a, b - a,
                                    static_cast<int32_t>(V), temperature[static_cast<size_t>(a)], acc + a,
                                    acc + count + a, stream_),
             "rejection sampling");
    a = b;
  }
  cuda::cuda_try(cudaMemcpyAsync(host + out_at, acc, 2 * n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_),
           "verdicts copy");
  verdict_out_at_ = out_at;
  return count;
}

void CudaTransformer::read_verdicts(std::span<const ForwardWindow> windows, int32_t verdicts, CudaLogits& out) {
  const auto* v = reinterpret_cast<const int32_t*>(impl_->verdict_host.as<unsigned char>() + verdict_out_at_);
  out.verdicts_.assign(windows.size(), SampledVerdict{});
  int32_t k = 0;
  for (size_t w = 0; w < windows.size(); ++w)
    if (windows[w].verdict) {
      out.verdicts_[w] = {v[k], v[verdicts + k]};
      ++k;
    }
}

}  // namespace specpipe
