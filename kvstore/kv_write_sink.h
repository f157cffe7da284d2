#pragma once
/// The one interception point for K/V writes (ARCHITECTURE.md sections 3 and 6).
///
/// A forward pass computes each layer's K and V for the tokens of its windows and hands
/// them to a KvWriteSink; it never writes the pool itself. The built-in DirectKvWriter
/// scatters them into the pool slots at once (the caller truncates rejected tokens
/// afterwards); a `kv_write` strategy such as NWOR stages them instead and commits only
/// the accepted ones. Attention reads a window's own K/V from the forward's dense window
/// buffer, so what a sink does with them cannot change the forward's result.
#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/kv_store.h"

namespace specpipe {

/// The K/V rows of one sequence's window in one layer.
struct WindowKvRows {
  SeqId seq;
  int32_t start_pos;  ///< position of row 0 (= committed length of the sequence)
  int32_t n;          ///< rows
  /// [n, ld]: kv_heads * head_dim floats per row; read. Both null when a device model
  /// wrote the rows into its own pool during the forward (only the direct strategy can
  /// take those: it counts them).
  const float* k;
  const float* v;     ///< [n, ld]; read
  int64_t ld;
  /// k and v are device memory (the pool's device): a device model's rows of a round
  /// the sink stages (stages_rows()), kept out of the pool. The host cannot read them.
  bool on_device = false;
};

/// A verify window of one sequence: positions [start, start + n).
struct WindowPlacement {
  SeqId seq;
  int32_t start;
  int32_t n;
};

/// After the verdict: the first `accepted` rows of the window become committed.
struct WindowCommit {
  SeqId seq;
  int32_t accepted;
};

/// Pool traffic of the K/V writes, for statistics and benchmarks.
struct KvWriteStats {
  int64_t rows_written = 0;      ///< (token, layer) rows written to the pool, prefill included
  int64_t prefill_rows_written = 0;  ///< of those, rows written outside verify rounds
  int64_t rows_not_written = 0;  ///< rows of rejected tokens kept out of the pool
  int64_t rows_wasted = 0;       ///< rows of rejected tokens written anyway (then truncated)
  int64_t rounds = 0;
  int64_t redo_rounds = 0;       ///< rounds whose accepted rows had to be recomputed
  int64_t row_bytes = 0;         ///< bytes of one row (K and V of one token in one layer)
};

class KvWriteSink {
 public:
  virtual ~KvWriteSink() = default;
  /// A verify round starts (the forward follows): its windows, positions reserved.
  /// Prefill forwards call write_layer without a round.
  virtual void begin_round(std::span<const WindowPlacement> /*windows*/) {}
  /// Whether the rows of the round begun last go to this sink instead of the pool: a
  /// device model then keeps them out of its pool and hands write_layer device rows
  /// (WindowKvRows::on_device). Asked before the round's forward.
  virtual bool stages_rows() const { return false; }
  /// Called once per layer of every forward, layers in ascending order.
  virtual void write_layer(int32_t layer, std::span<const WindowKvRows> windows) = 0;
  /// The round's verdicts. Returns false if the accepted rows are not in the pool (a
  /// staging strategy failed): the caller must commit nothing and recompute them.
  virtual bool commit_round(std::span<const WindowCommit> /*verdicts*/) { return true; }
  /// The round's forward failed: forget it.
  virtual void abort_round() {}
  virtual KvWriteStats stats() const { return {}; }
};

/// The built-in kv_write strategy: every row goes straight into its pool slot during
/// the forward (positions must be reserved); rejected rows are truncated afterwards.
class DirectKvWriter final : public KvWriteSink {
 public:
  explicit DirectKvWriter(KvStore& store) : store_(store) {}
  void begin_round(std::span<const WindowPlacement> windows) override;
  void write_layer(int32_t layer, std::span<const WindowKvRows> windows) override;
  bool commit_round(std::span<const WindowCommit> verdicts) override;
  void abort_round() override;
  KvWriteStats stats() const override;

 private:
  KvStore& store_;
  KvWriteStats stats_;
  bool in_round_ = false;
  std::vector<WindowPlacement> round_;
};

/// Writes rows [0, n) of `k`/`v` ([n, ld] floats) of one layer into pool slots of a
/// sequence's positions [start, start + n) (the positions must be reserved).
void write_rows_to_pool(KvStore& store, int32_t layer, SeqId seq, int32_t start, int32_t n, const float* k,
                        const float* v, int64_t ld);

}  // namespace specpipe
