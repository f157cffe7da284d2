// CudaTransformer::prefill_layerwise (issue 16 item 5): the design is in layer_prefill.h,
// the host plan in layer_prefill_plan.h.
#include "model/cuda/layer_prefill.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <span>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/attention_plan.h"
#include "model/cuda/cuda_transformer.h"
#include "model/cuda/decoder_step.h"
#include "model/cuda/layer_prefill_plan.h"
#include "model/cuda/transformer_state.h"

namespace specpipe {

using cuda::cuda_try;

void CudaTransformer::release_layer_prefill() {
  cuda::TransformerState& d = *impl_;
  const std::lock_guard stream_lock(d.stream_mutex);
  if (!d.prefill) return;
  // Its copies are done (prefill_layerwise ends with a sync); the stream too, for the
  // slots the compute stream wrote.
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  cuda_try(cudaStreamSynchronize(stream_), "sync");
  d.prefill.reset();
}

size_t CudaTransformer::prefill_buffer_bytes() const {
  const cuda::TransformerState& d = *impl_;
  if (!d.prefill) return 0;
  return d.prefill->slots.bytes() + d.prefill->rows.bytes() + d.prefill->meta.bytes();
}

void CudaTransformer::prepare_layer_prefill(const cuda::LayerPrefillPlan& plan, bool overlap) {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  if (!d.prefill) d.prefill = std::make_unique<cuda::LayerPrefillBuffers>();
  cuda::LayerPrefillBuffers& b = *d.prefill;
  const size_t slot_bytes = static_cast<size_t>(plan.blocks) * static_cast<size_t>(d.block_size) *
                            static_cast<size_t>(c.kv_dim()) * dtype_size(d.kv_dtype);
  const size_t x_bytes = cuda::align_up(static_cast<size_t>(plan.tokens) * static_cast<size_t>(c.hidden_size) * 4, 256);
  const size_t row_bytes = x_bytes + static_cast<size_t>(plan.tokens) * static_cast<size_t>(c.hidden_size) * 2;
  const size_t ws_bytes = static_cast<size_t>(plan.chunk) * static_cast<size_t>(c.num_heads) *
                          static_cast<size_t>(cuda::attention_chunks(plan.tokens)) *
                          static_cast<size_t>(c.head_dim + 2) * sizeof(float);
  const size_t slots_need = slot_bytes > b.slot_bytes ? 2 * cuda::kPrefillSlots * slot_bytes : 0;
  const size_t rows_need = row_bytes > b.rows.bytes() ? row_bytes : 0;
  const size_t ws_need = ws_bytes > d.workspace.bytes() ? ws_bytes : 0;
  if (slots_need + rows_need + ws_need > 0) {
    // Everything that may still read the old buffers is done; then ask for the memory
    // first, so a prompt too long for the device is refused with nothing freed.
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    size_t free_bytes = 0, total_bytes = 0;
    cuda_try(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
    const size_t held = (slots_need ? b.slots.bytes() : 0) + (rows_need ? b.rows.bytes() : 0) +
                        (ws_need ? d.workspace.bytes() : 0);
    if (slots_need + rows_need + ws_need > free_bytes + held)
      fail(ErrorCode::out_of_capacity,
           "layer-wise prefill of {} tokens needs {:.2f} GiB more device memory (two layer slots of its K/V, its "
           "residual rows, the attention workspace) but {:.2f} GiB are free: prefill it chunk by chunk",
           plan.tokens, static_cast<double>(slots_need + rows_need + ws_need - held) / (1 << 30),
           static_cast<double>(free_bytes) / (1 << 30));
    if (slots_need) {
      b.slots.reset();
      b.slot_bytes = 0;
      b.slots.allocate(slots_need, &device_bytes_);
      b.slot_bytes = slot_bytes;
    }
    if (rows_need) b.rows.allocate(rows_need, &device_bytes_);
    if (ws_need) grow_workspace(plan.chunk, cuda::attention_chunks(plan.tokens));
  }
  if (plan.meta.size() > b.meta.bytes()) {
    cuda_try(cudaStreamSynchronize(stream_), "sync");
    b.meta.allocate(plan.meta.size(), &device_bytes_);
    b.meta_host.allocate(plan.meta.size());
  }
  if (!b.copies || b.copies->overlap() != overlap) {
    b.copies.reset();  // waits for its copies
    b.copies = std::make_unique<cuda::CudaCopyStream>(stream_, overlap);
  }
}

void CudaTransformer::prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv,
                                        CudaLogits& out, bool overlap) {
  const ModelConfig& c = config_;
  cuda::TransformerState& d = *impl_;
  const cuda::LayerPrefillPlan plan =
      cuda::plan_layer_prefill(seq, prompt, kv, c, {options_.max_tokens, d.num_blocks, d.block_size, d.meta_layout});
  const HostKvTier* host = kv.host_tier();
  if (!plan.to_host.empty() && host->layout().dtype != d.kv_dtype)
    fail(ErrorCode::invalid_argument, "layer-wise prefill: the host tier holds {} K/V, the model {}",
         dtype_name(host->layout().dtype), dtype_name(d.kv_dtype));

  const std::lock_guard stream_lock(d.stream_mutex);
  settle_launched_chain();
  cuda_try(cudaSetDevice(options_.device), "cudaSetDevice");
  // Queued copies and a pending write-back first, in line (a freed pool block this
  // prompt now holds may still have to reach the host).
  apply_block_copies(host);
  flush_write_back(host);
  prepare_layer_prefill(plan, overlap);
  cuda::LayerPrefillBuffers& b = *d.prefill;
  cuda::CudaCopyStream& copies = *b.copies;

  // The previous forward ended with a sync: the pinned buffer is free.
  std::copy(plan.meta.begin(), plan.meta.end(), b.meta_host.as<unsigned char>());
  const unsigned char* mb = b.meta.as<unsigned char>();
  cuda_try(cudaMemcpyAsync(b.meta.as<unsigned char>(), b.meta_host.as<unsigned char>(), plan.meta.size(),
                           cudaMemcpyHostToDevice, stream_),
           "layer-wise prefill: metadata upload");
  const int64_t H = c.hidden_size;
  float* x = b.rows.as<float>();
  // xb after x, 256-byte aligned (prepare_layer_prefill's layout).
  auto* xb = reinterpret_cast<uint16_t*>(
      b.rows.as<unsigned char>() + cuda::align_up(static_cast<size_t>(plan.tokens) * static_cast<size_t>(H) * 4, 256));
  // Chunk ci's rows and metadata.
  const auto rows_of = [&](int32_t ci) {
    const int64_t first = int64_t{ci} * plan.chunk;
    return cuda::LayerRows{x + first * H, xb + first * H};
  };
  const auto meta_of = [&](int32_t ci, int32_t logit_rows) {
    const auto first = static_cast<size_t>(ci) * static_cast<size_t>(plan.chunk);
    return cuda::StepMeta{reinterpret_cast<const int64_t*>(mb + plan.slots_at) + first,
                          reinterpret_cast<const int32_t*>(mb + plan.tokens_at) + first,
                          reinterpret_cast<const int32_t*>(mb + plan.positions_at) + first,
                          reinterpret_cast<const int32_t*>(mb + plan.zeros_at),
                          reinterpret_cast<const int32_t*>(mb + plan.last_row_at),
                          reinterpret_cast<const int32_t*>(mb + plan.table_at),
                          reinterpret_cast<const cuda::AttentionWindowDesc*>(mb + plan.windows_at) + ci,
                          plan.chunk_rows(ci),
                          logit_rows,
                          d.argmax,
                          plan.chunk_rows(ci)};
  };
  cuda::StepSettings settings{options_.gemm, false, false, options_.copy_logits, options_.max_tokens, 0, {}, nullptr};

  const int32_t chunks = plan.chunks();
  const auto block_bytes = static_cast<size_t>(d.block_size) * static_cast<size_t>(c.kv_dim()) * dtype_size(d.kv_dtype);
  std::vector<CopyStream::Ticket> copied(cuda::kPrefillSlots, 0);
  try {
    for (int32_t ci = 0; ci < chunks; ++ci) cuda::enqueue_embedding(d, c, meta_of(ci, 0), rows_of(ci), stream_);
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const int32_t slot = l % cuda::kPrefillSlots;
      unsigned char* sk = b.slots.as<unsigned char>() + 2 * static_cast<size_t>(slot) * b.slot_bytes;
      unsigned char* sv = sk + b.slot_bytes;
      // Layer l - 2's copies out of this slot are done before layer l writes it (an
      // event the compute stream waits on; 0: the slot is fresh).
      copies.wait(copied[static_cast<size_t>(slot)]);
      for (int32_t ci = 0; ci < chunks; ++ci) {
        // The grid of a chunked forward's: chunks up to the keys of its last row.
        settings.max_chunks = cuda::attention_chunks(ci * plan.chunk + plan.chunk_rows(ci));
        cuda::enqueue_decoder_layer(d, c, settings, meta_of(ci, 0), l, rows_of(ci), {sk, sv}, stream_);
      }
      // After the layer's compute (the job's event): the slot's blocks to their places.
      copied[static_cast<size_t>(slot)] = copies.enqueue([&, l, sk, sv] {
        const cudaStream_t st = copies.stream();
        // One run of slot blocks to consecutive destination blocks, K then V.
        const auto copy_runs = [&](std::span<const cuda::SlotRun> runs, void* k_dst, void* v_dst, cudaMemcpyKind kind,
                                   const char* what) {
          for (const cuda::SlotRun& r : runs)
            for (const bool v : {false, true}) {
              auto* dst = static_cast<unsigned char*>(v ? v_dst : k_dst);
              const unsigned char* src = v ? sv : sk;
              cuda_try(cudaMemcpyAsync(dst + static_cast<size_t>(r.dst_first) * block_bytes,
                                       src + static_cast<size_t>(r.slot_first) * block_bytes,
                                       static_cast<size_t>(r.blocks) * block_bytes, kind, st),
                       what);
            }
        };
        copy_runs(plan.to_host, const_cast<void*>(host->k_data(l)), const_cast<void*>(host->v_data(l)),
                  cudaMemcpyDeviceToHost, "layer-wise prefill: K/V to the host tier");
        copy_runs(plan.to_pool, d.pool_k[static_cast<size_t>(l)], d.pool_v[static_cast<size_t>(l)],
                  cudaMemcpyDeviceToDevice, "layer-wise prefill: K/V to the pool");
      });
    }
    // Every copy is in place before anything after this prefill reads the pool or the tier.
    for (CopyStream::Ticket t : copied) copies.wait(t);
    const int32_t last = chunks - 1;
    const cuda::StepMeta head = meta_of(last, 1);
    cuda::enqueue_head(d, c, settings, head, rows_of(last).x, stream_);
    const int64_t V = c.vocab_size;
    cuda_try(cudaMemcpyAsync(d.host_ids(options_.max_tokens, V), d.argmax, 4, cudaMemcpyDeviceToHost, stream_),
             "argmax copy");
    if (options_.copy_logits)
      cuda_try(cudaMemcpyAsync(d.out_host.as<float>(), d.logits, static_cast<size_t>(V) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_),
               "logits copy");
    cuda_try(cudaStreamSynchronize(stream_), "layer-wise prefill");
    copies.synchronize();  // a job's enqueue error surfaces here
  } catch (...) {
    try {
      copies.synchronize();  // nothing of ours still runs on the tier or the pool
    } catch (...) {
    }
    throw;
  }
  out.vocab_ = c.vocab_size;
  out.first_ = {0};
  out.rows_ = {1};
  out.argmax_.assign(1, *d.host_ids(options_.max_tokens, c.vocab_size));
  if (options_.copy_logits) out.data_.assign(d.out_host.as<float>(), d.out_host.as<float>() + c.vocab_size);
  else out.data_.clear();
}

}  // namespace specpipe
