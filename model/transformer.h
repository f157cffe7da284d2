#pragma once
/// The decoder-only transformer forward pass (Llama / Qwen2 / Qwen3) on the CPU backend.
///
/// One call runs a batch of sequences, each with a window of n >= 1 new tokens:
/// prefill chunks, single-token decode and speculative verify windows are the same call
/// with different n. Each window starts at its sequence's committed KV length; attention
/// reads the committed prefix from the paged pool and the window's own K/V from a dense
/// window buffer; the window's K/V leave the forward only through a KvWriteSink.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/packed_matrix.h"
#include "kernels/cpu/rope.h"
#include "kvstore/kv_store.h"
#include "kvstore/kv_write_sink.h"
#include "model/config.h"
#include "model/weights.h"

namespace specpipe {

/// Which positions of a window need logits.
enum class LogitsMode { none, last, all };

struct ForwardWindow {
  SeqId seq;
  std::span<const int32_t> tokens;  ///< the window's new tokens (n >= 1)
  LogitsMode logits = LogitsMode::last;
  /// Position of tokens[0]; -1 = the sequence's committed length. A later start lets
  /// prefill chunks follow each other before the KV-router commits them: positions
  /// [length, start) must then already hold the earlier chunks' K/V.
  int32_t start = -1;
};

/// Logits of one forward: rows [vocab] for the positions asked, window by window.
class Logits {
 public:
  int32_t vocab() const { return vocab_; }
  /// Row `i` of window `w` (i counts the window's logits rows: 0 for `last`).
  std::span<const float> row(size_t w, int32_t i = 0) const;
  int32_t rows(size_t w) const { return rows_[w]; }
  size_t windows() const { return rows_.size(); }
  /// Replaces the contents with one row per window (equal sizes).
  void assign(const std::vector<std::vector<float>>& rows);

 private:
  friend class Transformer;
  int32_t vocab_ = 0;
  std::vector<float> data_;
  std::vector<int64_t> first_;  // first row of each window
  std::vector<int32_t> rows_;   // rows of each window
};

class Transformer {
 public:
  Transformer(ModelConfig config, ModelWeights weights);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  /// A KV store layout that fits this model.
  KvStoreConfig kv_config(int32_t num_blocks, int32_t block_size = 16) const;

  /// Runs every window through the model. Preconditions (checked): each window's
  /// sequence has reserved [start, start + n) in `kv` with start >= its committed
  /// length; positions stay below max_position_embeddings. K/V go to `sink` layer by layer; `kv` is only read.
  /// Not re-entrant: one forward at a time per Transformer (it owns its scratch).
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink,
               Logits& out);

 private:
  struct Scratch;
  void layer_forward(int32_t layer, std::span<const ForwardWindow> windows,
                     std::span<const int32_t> starts, const KvStore& kv, KvWriteSink& sink);

  /// The layer matrices repacked for the CPU GEMM (kernels/cpu/packed_matrix.h).
  struct PackedLayer {
    cpu::PackedMatrix q, k, v, o, gate, up, down;
  };

  ModelConfig config_;
  ModelWeights weights_;
  std::vector<PackedLayer> packed_;
  cpu::PackedMatrix lm_head_;
  cpu::RopeTable rope_;
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace specpipe
