#pragma once
/// The decoder-only transformer forward pass (Llama / Qwen2 / Qwen3) on the CPU backend:
/// the ForwardModel contract (model/forward_model.h) with the pool in the KvStore's host
/// tensors; the window's K/V leave the forward only through a KvWriteSink.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/packed_matrix.h"
#include "kernels/cpu/rope.h"
#include "model/forward_model.h"
#include "model/forward_phases.h"
#include "model/weights.h"

namespace specpipe {

class Transformer final : public ForwardModel {
 public:
  Transformer(ModelConfig config, ModelWeights weights);
  ~Transformer();
  Transformer(const Transformer&) = delete;
  Transformer& operator=(const Transformer&) = delete;

  const ModelConfig& config() const override { return config_; }
  Device device() const override { return Device{}; }
  const ModelWeights& weights() const { return weights_; }
  /// A KV store layout that fits this model (the pool lives in the store).
  KvStoreConfig kv_config(int32_t num_blocks, int32_t block_size = 16) const override;

  /// Runs every window through the model. Preconditions (checked): each window's
  /// sequence has reserved [start, start + n) in `kv` with start >= its committed
  /// length; positions stay below max_position_embeddings. K/V go to `sink` layer by layer; `kv` is only read.
  /// Not re-entrant: one forward at a time per Transformer (it owns its scratch).
  /// With host-tier K/V in `kv` (offload), every layer's attention reads them from the
  /// layer ring (enable_layer_ring first, else Error(invalid_argument)), the same keys in
  /// the same order as from the pool: the logits are the same bits.
  void forward(std::span<const ForwardWindow> windows, const KvStore& kv, KvWriteSink& sink,
               Logits& out) override;
  /// Layer-wise prefill (issue 16 items 5-6): the whole `prompt` of `seq` through one
  /// layer at a time, from position 0, each layer's K/V handed to `sink` (a
  /// LayerPrefillWriter: host part to the host tier on its copy stream, the rest to the
  /// pool); `out` gets the last position's logits. The books as check_layer_prefill
  /// (model/layer_prefill_check.h) wants; the caller commits the prompt past the host
  /// part after. The same bits as a chunked prefill with every block in the pool.
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, KvWriteSink& sink,
                         Logits& out);
  /// ForwardModel's: the prefill above through a LayerPrefillWriter whose copies run on
  /// a copy thread (in line after enable_layer_ring(.., false)), finished before it
  /// returns. Writes the host tier's memory of `kv` (its books are only read).
  void prefill_layerwise(SeqId seq, std::span<const int32_t> prompt, const KvStore& kv, Logits& out) override;
  void enable_layer_ring(int32_t slots, bool overlap = true) override;
  RingStats ring_stats() const override { return ring_ ? ring_->stats() : RingStats{}; }
  /// Times every later forward() phase by phase into `profile` (model/forward_phases.h)
  /// until called with nullptr (the default: not timed). The layer-wise prefill is never
  /// timed.
  void set_phase_profile(ForwardPhaseProfile* profile) { phase_profile_ = profile; }

 private:
  struct Scratch;
  /// The windows' token embeddings into the scratch rows.
  void embed(std::span<const ForwardWindow> windows);
  /// The final norm and LM head of the windows' logits rows into `out`.
  void head(std::span<const ForwardWindow> windows, Logits& out);
  /// Each row's absolute position into the scratch (the RoPE of every layer), after
  /// checking the positions and QK-norm's head size: once a forward, not once a layer.
  void row_positions(std::span<const ForwardWindow> windows, std::span<const int32_t> starts);
  /// `ring`: the open layer ring when some window's sequence has host-tier K/V.
  void layer_forward(int32_t layer, std::span<const ForwardWindow> windows,
                     std::span<const int32_t> starts, const KvStore& kv, KvWriteSink& sink, LayerRing* ring);

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
  std::unique_ptr<LayerRing> ring_;  // offload: streams host-tier K/V, layer by layer
  bool copy_overlap_ = true;         // the ring's and the layer-wise prefill's copies on a thread
  ForwardPhaseProfile* phase_profile_ = nullptr;
  PhaseClock phases_;  // the running forward's phase boundaries (no-ops without a profile)
};

}  // namespace specpipe
