#pragma once
/// The decoder-only transformer forward (Llama / Qwen2 / Qwen3) on one CUDA device, the
/// GPU twin of model/transformer.h (issue 6). Same window contract as
/// Transformer::forward: a batch of windows of n >= 1 new tokens, each starting at its
/// sequence's committed length (or an explicit later start), K/V written straight to the
/// reserved slots, logits of the last / all / no positions copied back as float32.
///
/// Numerics (ARCHITECTURE.md section 7): weights BF16 on the device (converted once from
/// the disk dtype, round to nearest even), activations FP32, GEMMs through the pinned
/// cuBLASLt BF16 algorithm (kernels/cuda/gemm.h: batch invariant for 1..max_tokens rows),
/// so a token's logits are the same bits in a decode step and in a verify window.
///
/// The KV pool lives on the device (FP32, the layout of kvstore/kv_tensors.h, per layer
/// [num_blocks, block_size, kv_heads, head_dim]); its bookkeeping (block tables, slots,
/// lengths) stays in the host KvStore passed to forward(). The store's own host tensors
/// are not used. The store must be built from kv_config() (same block count and size)
/// with the prefix cache off: shared-block copy-on-write happens on host tensors only.
///
/// One stream, stream-ordered; forward() synchronises once, at the end, to hand the
/// logits back. Not re-entrant. Needs CUDA (built only with SPECPIPE_CUDA).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"
#include "model/config.h"
#include "model/transformer.h"
#include "model/weights.h"

namespace specpipe {

/// Logits of one CUDA forward, window by window (rows as in Logits), plus the argmax of
/// each row computed on the device (lowest index wins ties, as cpu::argmax).
class CudaLogits {
 public:
  int32_t vocab() const { return vocab_; }
  std::span<const float> row(size_t w, int32_t i = 0) const;
  int32_t argmax(size_t w, int32_t i = 0) const;
  int32_t rows(size_t w) const { return rows_[w]; }
  size_t windows() const { return rows_.size(); }

 private:
  friend class CudaTransformer;
  int32_t vocab_ = 0;
  std::vector<float> data_;
  std::vector<int32_t> argmax_;
  std::vector<int64_t> first_;
  std::vector<int32_t> rows_;
};

/// Which batch-invariant GEMM serves the projections (kernels/cuda/gemm.h).
enum class CudaGemm {
  cublaslt,  ///< LtGemm, one pinned algorithm per shape (the default)
  rows,      ///< gemm_rows_bf16: a plain kernel, cheaper to launch for decode-sized m
};

struct CudaTransformerOptions {
  int32_t max_tokens = 64;  ///< most tokens of one forward (all windows): the GEMMs' max m
  CudaGemm gemm = CudaGemm::cublaslt;
  int32_t device = 0;
  /// false: forward() copies back only each logits row's argmax, not the row (a decode
  /// loop that needs only the greedy token). row() then throws.
  bool copy_logits = true;
};

class CudaTransformer {
 public:
  /// Uploads the weights (as BF16) and allocates a device KV pool of `kv_blocks` blocks
  /// of `block_size` tokens. Throws Error (internal: a CUDA / cuBLASLt failure, with the
  /// call; unsupported: a shape the kernels do not serve).
  CudaTransformer(const ModelConfig& config, const ModelWeights& weights, int32_t kv_blocks,
                  int32_t block_size = 16, CudaTransformerOptions options = {});
  ~CudaTransformer();
  CudaTransformer(const CudaTransformer&) = delete;
  CudaTransformer& operator=(const CudaTransformer&) = delete;

  const ModelConfig& config() const { return config_; }
  /// The KvStore layout matching the device pool (prefix cache off).
  KvStoreConfig kv_config() const;
  cudaStream_t stream() const { return stream_; }
  /// Bytes of device memory held (weights, pool, scratch).
  size_t device_bytes() const { return device_bytes_; }
  /// Whether forward() copies logits rows back (argmax ids always come back).
  void set_copy_logits(bool copy) { options_.copy_logits = copy; }
  /// The pinned cuBLASLt algorithm of each GEMM shape, for reports.
  std::vector<std::string> gemm_algorithms() const;

  /// Preconditions as Transformer::forward (checked): each window's sequence has
  /// reserved [start, start + n) in `kv`, start >= committed length, positions below
  /// max_position_embeddings; in all at most options.max_tokens tokens. `kv` is only read.
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, CudaLogits& out);

  /// Copies the device pool of `layer` to the host ([slots, kv_heads * head_dim] floats
  /// each for K and V), for checks.
  void read_pool(int32_t layer, std::vector<float>& k, std::vector<float>& v);

 private:
  struct Impl;
  ModelConfig config_;
  CudaTransformerOptions options_;
  cudaStream_t stream_ = nullptr;
  size_t device_bytes_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specpipe
