#pragma once
/// The CPU engine's layer-wise prefill with asynchronous offload (issue 16 items 5 and 6;
/// the device's is CudaTransformer::prefill_layerwise, model/cuda/layer_prefill.h): the
/// KvWriteSink of Transformer::prefill_layerwise for one sequence whose prompt's first
/// host_tokens positions are booked on the host tier (KvStore::book_host_prefix).
///
/// Per layer, the rows of the host part are copied into one of two dense slots and a job
/// on the copy stream scatters the slot into the sequence's host-tier blocks while the
/// next layer computes; layer l + 2 reuses the slot only after waiting for that job's
/// ticket (the buffer reuse ordered by tickets, as on the device by events). The rows
/// past the host part go straight to their pool slots. With an InlineCopyStream the
/// copies run in line (the seed's synchronous way).
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/copy_stream.h"
#include "kvstore/kv_write_sink.h"

namespace specpipe {

class LayerPrefillWriter final : public KvWriteSink {
 public:
  /// `store` keeps host tensors and a host tier of FP32 K/V when the sequence has host
  /// blocks (else Error(invalid_argument)).
  LayerPrefillWriter(KvStore& store, SeqId seq, std::shared_ptr<CopyStream> copies);
  ~LayerPrefillWriter() override;  ///< waits for the copies (they write the tier)
  LayerPrefillWriter(const LayerPrefillWriter&) = delete;
  LayerPrefillWriter& operator=(const LayerPrefillWriter&) = delete;

  /// One window: the sequence's rows from position 0 (Error(invalid_argument) otherwise).
  void write_layer(int32_t layer, std::span<const WindowKvRows> windows) override;
  /// Waits for every copy (rethrowing a copy's error): the host tier holds the prompt.
  void finish();

 private:
  KvStore& store_;
  SeqId seq_;
  std::shared_ptr<CopyStream> copies_;
  int32_t host_tokens_ = 0;
  std::vector<int32_t> host_blocks_;  // the sequence's host tier blocks, in position order
  std::vector<float> slots_[2];       // per slot: K rows then V rows of the host part
  CopyStream::Ticket copied_[2] = {0, 0};
};

}  // namespace specpipe
