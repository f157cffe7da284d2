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

#include "kvstore/kv_store.h"

namespace specpipe {

/// The K/V rows of one sequence's window in one layer.
struct WindowKvRows {
  SeqId seq;
  int32_t start_pos;  ///< position of row 0 (= committed length of the sequence)
  int32_t n;          ///< rows
  const float* k;     ///< [n, ld]: kv_heads * head_dim floats per row; read
  const float* v;     ///< [n, ld]; read
  int64_t ld;
};

class KvWriteSink {
 public:
  virtual ~KvWriteSink() = default;
  /// Called once per layer of every forward, layers in ascending order.
  virtual void write_layer(int32_t layer, std::span<const WindowKvRows> windows) = 0;
};

/// Writes every row straight into its pool slot. Requires the positions reserved.
class DirectKvWriter final : public KvWriteSink {
 public:
  explicit DirectKvWriter(KvStore& store) : store_(store) {}
  void write_layer(int32_t layer, std::span<const WindowKvRows> windows) override;

 private:
  KvStore& store_;
};

}  // namespace specpipe
